"""Learning-rate schedules (PyTorch's ``torch.optim.lr_scheduler`` and Caffe's policies).

Call ``scheduler.step()`` once per epoch (per iteration for ``OneCycleLR`` and the
Caffe-style ``PolyLR``/``InvLR``), after ``optimizer.step()``;
``ReduceLROnPlateau`` takes the monitored value: ``scheduler.step(val_loss)``.

Like PyTorch's, ``step()`` multiplies each group's *current* lr by this step's
factor (PyTorch's "chainable form"), so per-group lr multipliers are preserved
and several schedulers can drive one optimizer: ``ChainedScheduler`` steps them
all every step (their factors multiply), ``SequentialLR`` hands over from one
to the next at milestones, and a ``ReduceLROnPlateau`` may sit beside either.
For one scheduler alone this gives the closed form below, from the group's base
lr (its lr when the first scheduler was made, kept as ``group["initial_lr"]``)
and ``t = last_epoch``, to rounding, and torch's numbers exactly. ``step(epoch)``
and resuming with ``last_epoch=k`` set the closed form (at ``epoch``, at
``k + 1``) instead; to resume a stack, restore the optimizer's and the
schedulers' ``state_dict`` (the groups hold the current lrs, as in PyTorch).
Schedules marked *sets* compute the lr from the base lr (as PyTorch's do), so in
a chain they replace what the schedulers stepped before them set.

=====================  =============================================
``StepLR``             ``base * gamma ** (t // step_size)``
``MultiStepLR``        ``base * gamma ** (number of milestones <= t)``
``ConstantLR``         ``base * factor`` while ``t < total_iters``, then ``base``
``LinearLR``           ``base * (start + (end - start) * min(t, total_iters) / total_iters)``
``ExponentialLR``      ``base * gamma ** t``
``CosineAnnealingLR``  ``eta_min + (base - eta_min) * (1 + cos(pi t / T_max)) / 2``
``PolyLR`` (Caffe)     ``base * (1 - min(t, max_iter) / max_iter) ** power``
``InvLR`` (Caffe)      ``base * (1 + gamma * t) ** (-power)``
``LambdaLR`` (sets)    ``base * lr_lambda(t)``
``OneCycleLR`` (sets)  ``max_lr / div_factor`` up to ``max_lr`` over ``pct_start`` of the
                       steps, then down to ``/ final_div_factor``; momentum the other way
=====================  =============================================
"""

from __future__ import annotations

import bisect
import math

from ..errors import ArgumentError
from .lr_scheduler_base import LRScheduler, _check_int, _check_optimizer, _check_range, _per_group
from .lr_scheduler_meta import ChainedScheduler, ReduceLROnPlateau, SequentialLR

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR", "ExponentialLR",
           "CosineAnnealingLR", "LambdaLR", "PolyLR", "InvLR", "OneCycleLR",
           "ReduceLROnPlateau", "SequentialLR", "ChainedScheduler"]


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` steps (Caffe's ``step``).

    >>> sched = optim.lr_scheduler.StepLR(opt, step_size=30, gamma=0.1)
    """

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        self.step_size = _check_int("StepLR", "step_size", step_size, 1)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * self.gamma ** (t // self.step_size)

    def _chain_lr(self, lr, t, i):
        if t == 0 or t % self.step_size != 0:
            return lr
        return lr * self.gamma


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each milestone (Caffe's ``multistep``); a
    milestone given twice multiplies by ``gamma ** 2``.

    >>> sched = optim.lr_scheduler.MultiStepLR(opt, milestones=[30, 80], gamma=0.1)
    """

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        milestones = list(milestones)
        for m in milestones:
            _check_int("MultiStepLR", "each milestone", m, 0)
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, t)

    def _chain_lr(self, lr, t, i):
        count = bisect.bisect_right(self.milestones, t) - bisect.bisect_left(self.milestones, t)
        return lr * self.gamma ** count if count else lr


class ConstantLR(LRScheduler):
    """Multiply the lr by ``factor`` for the first ``total_iters`` steps.

    >>> sched = optim.lr_scheduler.ConstantLR(opt, factor=0.5, total_iters=4)
    """

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1):
        # factor 0 could not be undone at total_iters (PyTorch divides by it there)
        self.factor = _check_range("ConstantLR", "factor", factor, 0, 1, open_low=True)
        self.total_iters = _check_int("ConstantLR", "total_iters", total_iters, 1)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * (self.factor + (t >= self.total_iters) * (1 - self.factor))

    def _chain_lr(self, lr, t, i):
        if t == 0:
            return lr * self.factor
        if t != self.total_iters:
            return lr
        return lr * (1.0 / self.factor)


class LinearLR(LRScheduler):
    """Scale the lr linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` steps, then keep it (a warm-up).

    >>> warmup = optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5)
    """

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        self.start_factor = _check_range("LinearLR", "start_factor", start_factor, 0, 1,
                                         open_low=True)
        self.end_factor = _check_range("LinearLR", "end_factor", end_factor, 0, 1)
        self.total_iters = _check_int("LinearLR", "total_iters", total_iters, 1)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        s, e = self.start_factor, self.end_factor
        return base_lr * (s + (e - s) * min(self.total_iters, t) / self.total_iters)

    def _chain_lr(self, lr, t, i):
        s, e = self.start_factor, self.end_factor
        if t == 0:
            return lr * s
        if self._is_initial or t > self.total_iters:
            return lr
        return lr * (1.0 + (e - s) / (self.total_iters * s + (t - 1) * (e - s)))


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every step (Caffe's ``exp``).

    >>> sched = optim.lr_scheduler.ExponentialLR(opt, gamma=0.95)
    """

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * self.gamma ** t

    def _chain_lr(self, lr, t, i):
        return lr if self._is_initial else lr * self.gamma


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from the base lr down to ``eta_min`` over ``T_max`` steps
    (SGDR without restarts); it rises again after ``T_max``.

    >>> sched = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100, eta_min=1e-5)
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        self.T_max = _check_int("CosineAnnealingLR", "T_max", T_max, 1)
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        cos = math.cos(math.pi * t / self.T_max)
        return self.eta_min + (base_lr - self.eta_min) * (1 + cos) / 2

    def _chain_lr(self, lr, t, i):
        T, eta = self.T_max, self.eta_min
        if self._is_initial:
            return lr
        if (t - 1 - T) % (2 * T) == 0:  # leaving a minimum: the ratio below would be 0/0
            return lr + (self.base_lrs[i] - eta) * (1 - math.cos(math.pi / T)) / 2
        return ((1 + math.cos(math.pi * t / T)) / (1 + math.cos(math.pi * (t - 1) / T))
                * (lr - eta) + eta)


class LambdaLR(LRScheduler):
    """``base_lr * lr_lambda(t)``; one function, or one per param group.
    The functions are not part of ``state_dict``: pass them again on resume.

    >>> sched = optim.lr_scheduler.LambdaLR(opt, lambda t: 0.95 ** t)
    """

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        n = len(optimizer.param_groups)
        fns = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(fns) != n:
            raise ArgumentError(f"LambdaLR: got {len(fns)} lr_lambdas for {n} param groups")
        self.lr_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * self.lr_lambdas[i](t)


class PolyLR(LRScheduler):
    """Caffe's ``poly`` policy: ``base * (1 - t / max_iter) ** power``, reaching 0
    at ``max_iter`` (and staying there); PyTorch's ``PolynomialLR`` with
    ``total_iters=max_iter``. Step it every iteration.

    >>> sched = optim.lr_scheduler.PolyLR(opt, max_iter=90000, power=0.9)
    """

    def __init__(self, optimizer, max_iter: int, power: float = 1.0, last_epoch: int = -1):
        self.max_iter = _check_int("PolyLR", "max_iter", max_iter, 1)
        self.power = power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * (1 - min(t, self.max_iter) / self.max_iter) ** self.power

    def _chain_lr(self, lr, t, i):
        if self._is_initial or t > self.max_iter:
            return lr
        T = self.max_iter
        return lr * ((1.0 - t / T) / (1.0 - (t - 1) / T)) ** self.power


class InvLR(LRScheduler):
    """Caffe's ``inv`` policy: ``base * (1 + gamma * t) ** (-power)`` (LeNet's
    solver uses gamma=1e-4, power=0.75). Step it every iteration. In a chain it
    multiplies the lr by ``((1 + gamma t) / (1 + gamma (t - 1))) ** (-power)``.

    >>> sched = optim.lr_scheduler.InvLR(opt, gamma=1e-4, power=0.75)
    """

    def __init__(self, optimizer, gamma: float, power: float, last_epoch: int = -1):
        self.gamma = _check_range("InvLR", "gamma", gamma, 0, None)
        self.power = power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * (1 + self.gamma * t) ** (-self.power)

    def _chain_lr(self, lr, t, i):
        if self._is_initial:
            return lr
        return lr * ((1 + self.gamma * t) / (1 + self.gamma * (t - 1))) ** (-self.power)


class OneCycleLR(LRScheduler):
    """The 1cycle policy (Smith & Topin): the lr rises from ``max_lr / div_factor``
    to ``max_lr`` over the first ``pct_start`` of ``total_steps`` (or
    ``epochs * steps_per_epoch``), then anneals (``"cos"`` or ``"linear"``) to
    ``max_lr / div_factor / final_div_factor``; ``three_phase`` returns to the
    start before the final descent. With ``cycle_momentum`` the momentum (SGD's
    ``momentum``, Adam's ``betas[0]``) goes from ``max_momentum`` down to
    ``base_momentum`` and back. Step it every batch; stepping more than
    ``total_steps`` times raises.

    >>> sched = optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, total_steps=1000)
    """

    def __init__(self, optimizer, max_lr, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        name = "OneCycleLR"
        _check_optimizer(name, optimizer)
        if total_steps is not None:
            self.total_steps = _check_int(name, "total_steps", total_steps, 1)
        elif epochs is not None and steps_per_epoch is not None:
            self.total_steps = (_check_int(name, "epochs", epochs, 1)
                                * _check_int(name, "steps_per_epoch", steps_per_epoch, 1))
        else:
            raise ArgumentError(f"{name}: give total_steps, or epochs and steps_per_epoch")
        self.pct_start = _check_range(name, "pct_start", pct_start, 0, 1)
        if anneal_strategy not in ("cos", "linear"):
            raise ArgumentError(f"{name}: anneal_strategy must be 'cos' or 'linear', got "
                                f"{anneal_strategy!r}")
        self._anneal_func_type = anneal_strategy
        _check_range(name, "div_factor", div_factor, 0, None, open_low=True)
        _check_range(name, "final_div_factor", final_div_factor, 0, None, open_low=True)
        max_lrs = _per_group(name, "max_lr", optimizer, max_lr)
        for v in max_lrs:
            _check_range(name, "max_lr", v, 0, None)
        up = float(self.pct_start * self.total_steps) - 1
        last = self.total_steps - 1
        phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum")]
        if three_phase:
            phases += [(float(2 * self.pct_start * self.total_steps) - 2, "max_lr",
                        "initial_lr", "base_momentum", "max_momentum"),
                       (last, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            phases += [(last, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        keys = ("end_step", "start_lr", "end_lr", "start_momentum", "end_momentum")
        self._schedule_phases = [dict(zip(keys, p)) for p in phases]
        groups = optimizer.param_groups
        if last_epoch == -1:
            for lr, g in zip(max_lrs, groups):
                g["initial_lr"] = lr / div_factor
                g["max_lr"] = lr
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = bool(cycle_momentum)
        needed = ["initial_lr", "max_lr", "min_lr"]
        if self.cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ArgumentError(f"{name}: cycle_momentum=True needs an optimizer with "
                                    f"momentum or betas; {type(optimizer).__name__} has "
                                    "neither (pass cycle_momentum=False)")
            self.use_beta1 = "betas" in optimizer.defaults
            top = 1 if self.use_beta1 else None  # Adam's beta1 must stay below 1
            maxs = _per_group(name, "max_momentum", optimizer, max_momentum)
            bases = _per_group(name, "base_momentum", optimizer, base_momentum)
            for m in maxs + bases:
                _check_range(name, "momentum", m, 0, top, open_high=True)
            if last_epoch == -1:
                for hi, lo, g in zip(maxs, bases, groups):
                    self._set_momentum(g, hi)
                    g["max_momentum"], g["base_momentum"] = hi, lo
            needed += ["max_momentum", "base_momentum"]
        for i, g in enumerate(groups):
            missing = [k for k in needed if k not in g]
            if missing:
                raise ArgumentError(f"{name}: resuming at last_epoch={last_epoch} needs "
                                    f"{missing} in param group {i}")
        super().__init__(optimizer, last_epoch)

    def _set_momentum(self, group, m):
        if self.use_beta1:
            group["betas"] = (m, *group["betas"][1:])
        else:
            group["momentum"] = m

    def _anneal(self, start, end, pct):
        if self._anneal_func_type == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def _phase(self, t):
        """The phase step ``t`` is in, and how far through it (0..1)."""
        start = 0.0
        for k, phase in enumerate(self._schedule_phases):
            end = phase["end_step"]
            if t <= end or k == len(self._schedule_phases) - 1:
                if end == start:
                    raise ArgumentError(
                        f"OneCycleLR: phase {k + 1} of the schedule is empty (it starts and "
                        f"ends at step {end:g}) with total_steps={self.total_steps} and "
                        f"pct_start={self.pct_start}; choose a pct_start that gives every "
                        "phase at least one step")
                return phase, (t - start) / (end - start)
            start = end

    def lr_at(self, base_lr, t, i):
        phase, pct = self._phase(t)
        g = self.optimizer.param_groups[i]
        return self._anneal(g[phase["start_lr"]], g[phase["end_lr"]], pct)

    def step(self, epoch: int | None = None) -> None:
        """Advance one step (or jump to ``epoch``): set lrs and momenta."""
        t = self.last_epoch + 1 if epoch is None else int(epoch)
        if t > self.total_steps:
            raise ArgumentError(f"OneCycleLR: tried to step {t} times; the specified number "
                                f"of total steps is {self.total_steps}")
        super().step(epoch)
        if self.cycle_momentum:
            phase, pct = self._phase(t)
            for g in self.optimizer.param_groups:
                self._set_momentum(g, self._anneal(g[phase["start_momentum"]],
                                                   g[phase["end_momentum"]], pct))
