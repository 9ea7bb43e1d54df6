"""Caffe's solver arithmetic: the learning-rate policies (``SGDSolver::GetLearningRate``)
and the parameter update of ``SGDSolver::ApplyUpdate`` and its subclasses.

One iteration's update, in Caffe's order:

1. ``ClipGradients``: with ``clip_gradients >= 0``, when the L2 norm of all the
   learnable parameters' diffs together exceeds it, every diff is scaled by
   ``clip_gradients / norm`` (before the ``iter_size`` normalisation);
2. per parameter, ``Normalize``: ``diff *= 1 / iter_size``;
3. ``Regularize``: ``diff += weight_decay * decay_mult * data`` (L2) or
   ``* sign(data)`` (L1);
4. ``ComputeUpdateValue`` of the solver type (:data:`UPDATES`), with
   ``local_rate = rate * lr_mult``; the update is left in ``diff``;
5. ``data -= diff`` (``Net::Update``).

Every step computes in float32 as Caffe does with ``Dtype = float`` (the solver's
constants are rounded to float32 first: ``1 - momentum`` is Caffe's
``Dtype(1) - momentum``); Adam's bias correction is computed in double and rounded.
The arrays are the parameters' own (NumPy, or CuPy on a GPU), updated in place.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np

from ...device import get_array_module
from ...errors import ArgumentError

__all__ = ["SOLVER_TYPES", "LR_POLICIES", "UPDATES", "CaffeSolverError", "learning_rate",
           "check_lr_policy", "Updater"]

SOLVER_TYPES = ("SGD", "Nesterov", "AdaGrad", "RMSProp", "AdaDelta", "Adam")
"""Caffe's solver types (``type:``), in the order of the deprecated ``solver_type`` enum
(SGD = 0 ... ADAM = 5)."""

LR_POLICIES = ("fixed", "step", "exp", "inv", "multistep", "poly", "sigmoid")
"""Caffe's learning-rate policies (``lr_policy:``)."""


class CaffeSolverError(ArgumentError):
    """A solver option has a value Caffe refuses (or that tapegrad does not run): the
    message names the option, its value and what to do."""


# ------------------------------------------------------------------ learning rate

_NEEDS = {  # lr_policy -> the fields its formula reads besides base_lr
    "fixed": (), "step": ("gamma", "stepsize"), "exp": ("gamma",), "inv": ("gamma", "power"),
    "multistep": ("gamma", "stepvalue"), "poly": ("power", "max_iter"),
    "sigmoid": ("gamma", "stepsize"),
}
_FORMULAS = {
    "fixed": "base_lr", "step": "base_lr * gamma ^ floor(iter / stepsize)",
    "exp": "base_lr * gamma ^ iter", "inv": "base_lr * (1 + gamma * iter) ^ (-power)",
    "multistep": "base_lr * gamma ^ (the number of stepvalue reached)",
    "poly": "base_lr * (1 - iter / max_iter) ^ power",
    "sigmoid": "base_lr / (1 + exp(-gamma * (iter - stepsize)))",
}


def check_lr_policy(sp) -> None:
    """Refuse an unknown ``lr_policy``, or one whose formula lacks a field (Caffe
    would read the field's default 0 and train at a rate of 0 or ``base_lr``
    forever), with Caffe's own checks (``stepsize > 0`` for step, ``gamma >= 0``)."""
    policy = sp.lr_policy
    if policy not in _NEEDS:
        what = "is not set" if not policy else f"is {policy!r}"
        raise CaffeSolverError(f"lr_policy {what}; Caffe's learning rate policies are "
                               f"{', '.join(LR_POLICIES)} (e.g. lr_policy: \"fixed\")")
    if not sp.HasField("base_lr"):
        raise CaffeSolverError("base_lr is not set: give the solver a base learning rate "
                               "(e.g. base_lr: 0.01)")
    for f in _NEEDS[policy]:
        if not (len(sp.stepvalue) if f == "stepvalue" else sp.HasField(f)):
            raise CaffeSolverError(f"lr_policy {policy!r} ({_FORMULAS[policy]}) needs {f}, "
                                   "which is not set: add it to the solver")
    if policy in ("step", "exp", "inv") and sp.gamma < 0:
        raise CaffeSolverError(f"lr_policy {policy!r}: gamma is {sp.gamma:g}, Caffe needs "
                               "gamma >= 0")
    if policy == "step" and sp.stepsize <= 0:
        raise CaffeSolverError(f"lr_policy 'step': stepsize is {sp.stepsize}, Caffe needs "
                               "stepsize > 0")
    if policy == "poly" and sp.max_iter <= 0:
        raise CaffeSolverError(f"lr_policy 'poly': max_iter is {sp.max_iter}, the policy "
                               "needs max_iter > 0")


def learning_rate(sp, it: int, current_step: int | None = None) -> float:
    """Caffe's learning rate at iteration ``it`` for the solver ``sp`` (a
    ``SolverParameter``): fixed, step, exp, inv, multistep, poly or sigmoid (see
    :data:`LR_POLICIES`). For ``multistep``, ``current_step`` is the number of
    ``stepvalue`` passed (Caffe's ``current_step_``, which the solver advances by at
    most one per iteration); by default it counts the ``stepvalue`` that ``it`` has
    reached, in order. A ``poly`` rate past ``max_iter`` is NaN, as Caffe's ``pow``.

    >>> sp = caffe.read_solver('lr_policy: "step" base_lr: 0.1 gamma: 0.5 stepsize: 10')
    >>> caffe.learning_rate(sp, 25)     # 0.1 * 0.5 ** 2 (in float32's 0.1)
    0.02500000037252903
    """
    check_lr_policy(sp)
    policy, base, gamma, it = sp.lr_policy, sp.base_lr, sp.gamma, int(it)
    if policy == "fixed":
        return base
    if policy == "step":
        return base * gamma ** (it // sp.stepsize)
    if policy == "exp":
        return base * gamma ** it
    if policy == "inv":
        return base * (1 + gamma * it) ** -sp.power
    if policy == "multistep":
        if current_step is None:
            current_step = 0
            while current_step < len(sp.stepvalue) and it >= sp.stepvalue[current_step]:
                current_step += 1
        return base * gamma ** current_step
    if policy == "poly":
        left = 1 - it / sp.max_iter
        return base * left ** sp.power if left >= 0 else math.nan
    z = -gamma * (it - sp.stepsize)  # sigmoid
    return base / (1 + math.exp(z)) if z < 700 else 0.0


# ------------------------------------------------------------------------ updates
# Each takes (xp, g, h, lr, c, t): the normalised, regularised diff g, the
# parameter's history arrays h (updated in place), local_rate lr, the float32
# constants c and t = iter + 1; it returns the update (data -= update).


def _sgd(xp, g, h, lr, c, t):
    (v,) = h
    v *= c.momentum
    v += lr * g
    return v


def _nesterov(xp, g, h, lr, c, t):
    (v,) = h
    prev = v * c.momentum
    v *= c.momentum
    v += lr * g
    out = v * c.one_plus_momentum
    out -= prev
    return out


def _adagrad(xp, g, h, lr, c, t):
    (v,) = h
    v += g * g
    d = xp.sqrt(v)
    d += c.delta
    return lr * (g / d)


def _rmsprop(xp, g, h, lr, c, t):
    (v,) = h
    v *= c.rms_decay
    v += c.one_minus_rms_decay * (g * g)
    d = xp.sqrt(v)
    d += c.delta
    return lr * (g / d)


def _adadelta(xp, g, h, lr, c, t):
    grads, updates = h  # the decayed means of diff^2 and of update^2; momentum decays
    grads *= c.momentum
    grads += c.one_minus_momentum * (g * g)
    d = g * xp.sqrt((updates + c.delta) / (grads + c.delta))
    updates *= c.momentum
    updates += c.one_minus_momentum * (d * d)
    return lr * d


def _adam(xp, g, h, lr, c, t):
    m, v = h  # beta1 = momentum, beta2 = momentum2, eps = delta
    m *= c.momentum
    m += c.one_minus_momentum * g
    v *= c.momentum2
    v += c.one_minus_momentum2 * (g * g)
    b1, b2 = float(c.momentum), float(c.momentum2)
    correction = np.float32(math.sqrt(1 - b2 ** t) / (1 - b1 ** t))
    d = xp.sqrt(v)
    d += c.delta
    return (m / d) * (lr * correction)


UPDATES = {"SGD": (1, _sgd), "Nesterov": (1, _nesterov), "AdaGrad": (1, _adagrad),
           "RMSProp": (1, _rmsprop), "AdaDelta": (2, _adadelta), "Adam": (2, _adam)}
"""Solver type -> (number of history blobs per parameter, its ComputeUpdateValue)."""

REGULARIZATION = ("L2", "L1")


def _check_type(sp) -> None:
    """Caffe's ``constructor_sanity_check`` of each solver type."""
    if sp.type not in UPDATES:
        raise CaffeSolverError(f"type {sp.type!r} is not a Caffe solver type; Caffe's are "
                               f"{', '.join(SOLVER_TYPES)}")
    if sp.type in ("AdaGrad", "RMSProp") and sp.momentum != 0:
        raise CaffeSolverError(f"type {sp.type!r} with momentum {sp.momentum:g}: Caffe's "
                               f"{sp.type} takes no momentum; remove momentum from the solver")
    if sp.type == "RMSProp" and not 0 <= sp.rms_decay < 1:
        raise CaffeSolverError(f"rms_decay is {sp.rms_decay:g}; RMSProp needs 0 <= "
                               "rms_decay < 1")
    if sp.regularization_type not in REGULARIZATION:
        raise CaffeSolverError(f"regularization_type {sp.regularization_type!r} is not one of "
                               "Caffe's (\"L2\" or \"L1\")")


class Updater:
    """``SGDSolver::ApplyUpdate`` of one solver type (``sp.type``) over the learnable
    parameters. ``history`` holds, as Caffe's ``history_``, one list of arrays per
    history kind (Adam: the ``m`` of every parameter, then every ``v``; AdaDelta:
    the mean squared diffs, then the mean squared updates), created at the first
    update or set from a ``.solverstate``."""

    def __init__(self, sp):
        _check_type(sp)
        self.type = sp.type
        self.n_history, self.compute = UPDATES[sp.type]
        f32 = np.float32
        one = f32(1)
        mom, mom2, rms = f32(sp.momentum), f32(sp.momentum2), f32(sp.rms_decay)
        self.c = SimpleNamespace(momentum=mom, one_plus_momentum=one + mom,
                                 one_minus_momentum=one - mom, momentum2=mom2,
                                 one_minus_momentum2=one - mom2, rms_decay=rms,
                                 one_minus_rms_decay=one - rms, delta=f32(sp.delta))
        self.clip = f32(sp.clip_gradients)
        self.iter_size = int(sp.iter_size)
        self.weight_decay = f32(sp.weight_decay)
        self.l1 = sp.regularization_type == "L1"
        self.history: list[list] | None = None

    def init_history(self, datas) -> None:
        """Zero histories for parameters of these arrays (Caffe's ``PreSolve``)."""
        self.history = [[get_array_module(d).zeros_like(d) for d in datas]
                        for _ in range(self.n_history)]

    def __call__(self, params, rate: float, it: int) -> None:
        """One update of ``params`` (``(data, diff, lr_mult, decay_mult)`` each, arrays
        changed in place) at learning rate ``rate``, iteration ``it``."""
        if self.history is None:
            self.init_history([p[0] for p in params])
        diffs = [p[1] for p in params]
        if self.clip >= 0:  # ClipGradients: the global L2 norm, before Normalize
            l2 = np.sqrt(np.float32(sum(float(get_array_module(d).vdot(d, d)) for d in diffs)))
            if l2 > self.clip:
                scale = self.clip / l2
                for d in diffs:
                    d *= scale
        rate = np.float32(rate)
        norm = np.float32(1) / np.float32(self.iter_size)
        for j, (data, diff, lr_mult, decay_mult) in enumerate(params):
            xp = get_array_module(data)
            if self.iter_size > 1:
                diff *= norm
            decay = self.weight_decay * np.float32(decay_mult)
            if decay:
                diff += decay * (xp.sign(data) if self.l1 else data)
            h = [kind[j] for kind in self.history]
            diff[...] = self.compute(xp, diff, h, rate * np.float32(lr_mult), self.c, it + 1)
            data -= diff
