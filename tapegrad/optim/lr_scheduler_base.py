"""The base of every learning-rate schedule (:class:`LRScheduler`) and the argument
checks the schedules share (tapegrad/optim/lr_scheduler.py, lr_scheduler_meta.py)."""

from __future__ import annotations

import math
import numbers

from ..args import int_at_least
from ..errors import ArgumentError, ArgumentTypeError
from .optimizer import Optimizer


def _is_real(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def _check_int(name: str, what: str, v, low: int) -> int:
    return int_at_least(name, what, v, low)


def _check_range(name: str, what: str, v, low, high, *, open_low=False, open_high=False):
    ok = _is_real(v) and (v > low if open_low else v >= low)
    if ok and high is not None:
        ok = v < high if open_high else v <= high
    if not ok:
        lo, hi = "(" if open_low else "[", ")" if open_high else "]"
        where = f"in {lo}{low}, {high}{hi}" if high is not None else \
            f"{'>' if open_low else '>='} {low}"
        raise ArgumentError(f"{name}: {what} must be a number {where}, got {v!r}")
    return v


def _check_optimizer(name: str, optimizer) -> None:
    if not isinstance(optimizer, Optimizer):
        raise ArgumentTypeError(f"{name}: expected a tapegrad.optim.Optimizer, got "
                                f"{type(optimizer).__name__}")


def _per_group(name: str, what: str, optimizer, value) -> list:
    """``value`` for every param group (PyTorch's ``_format_param``)."""
    n = len(optimizer.param_groups)
    values = list(value) if isinstance(value, (list, tuple)) else [value] * n
    if len(values) != n:
        raise ArgumentError(f"{name}: got {len(values)} values of {what} for {n} param groups")
    return values


class LRScheduler:
    """Base class: subclasses define the closed form ``lr_at(base_lr, t, i)`` and,
    where PyTorch has one, the chainable update ``_chain_lr(lr, t, i)`` (group
    ``i``'s current ``lr`` times step ``t``'s factor)."""

    _is_initial = False  # True during the constructor's step (PyTorch's _initial_mode)

    def __init__(self, optimizer, last_epoch: int = -1):
        name = type(self).__name__
        _check_optimizer(name, optimizer)
        _check_int(name, "last_epoch", last_epoch, -1)
        self.optimizer = optimizer
        for i, g in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                g.setdefault("initial_lr", g["lr"])
            elif "initial_lr" not in g:
                raise ArgumentError(f"{name}: resuming at last_epoch={last_epoch} needs "
                                    f"'initial_lr' in param group {i}")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._resumed = last_epoch != -1
        if self._resumed:
            self.step(last_epoch + 1)
        else:
            self._initial_step()

    def _initial_step(self) -> None:
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def lr_at(self, base_lr: float, t: int, group_index: int) -> float:
        raise NotImplementedError

    def _chain_lr(self, lr: float, t: int, group_index: int) -> float:
        """Step ``t``'s lr from the group's current ``lr``. Schedules without a
        chainable form (LambdaLR, OneCycleLR, as in PyTorch) set the closed form."""
        return self.lr_at(self.base_lrs[group_index], t, group_index)

    def get_lr(self) -> list[float]:
        """The closed-form lrs at ``last_epoch`` (what this scheduler alone sets)."""
        return [self.lr_at(b, self.last_epoch, i) for i, b in enumerate(self.base_lrs)]

    def get_last_lr(self) -> list[float]:
        """The lrs set by the latest ``step()``."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one step (chainable form), or jump to ``epoch`` (closed form),
        and set the groups' lrs."""
        groups = self.optimizer.param_groups
        if len(groups) != len(self.base_lrs):
            raise ArgumentError(f"{type(self).__name__}: the optimizer has {len(groups)} param "
                                f"groups, the scheduler was made for {len(self.base_lrs)}")
        if epoch is None:
            t = self.last_epoch + 1
            lrs = [self._chain_lr(g["lr"], t, i) for i, g in enumerate(groups)]
        else:
            t = int(epoch)
            lrs = [self.lr_at(b, t, i) for i, b in enumerate(self.base_lrs)]
        self.last_epoch = t
        for g, lr in zip(groups, lrs):
            g["lr"] = lr
        self._last_lr = lrs

    _not_state = ("optimizer", "lr_lambdas", "_is_initial", "_resumed")

    def state_dict(self) -> dict:
        """Everything but the optimizer (and functions, which cannot be saved).
        The current lrs live in the optimizer's groups: restore its state too."""
        return {k: v for k, v in self.__dict__.items()
                if k not in self._not_state and not callable(v)}

    def load_state_dict(self, state_dict: dict) -> None:
        for k, v in state_dict.items():
            self.__dict__[k] = list(v) if isinstance(v, tuple) else v
