"""The schedulers that other things drive: ``ReduceLROnPlateau`` (a monitored
metric) and the stacks ``SequentialLR`` / ``ChainedScheduler`` (other
schedulers). Imported by, and documented with, :mod:`.lr_scheduler`."""

from __future__ import annotations

import bisect
import math

from ..args import is_int
from ..errors import ArgumentError, ArgumentTypeError, StateDictError
from .lr_scheduler_base import (
    LRScheduler,
    _check_int,
    _check_optimizer,
    _check_range,
    _per_group,
)

__all__ = ["ReduceLROnPlateau", "SequentialLR", "ChainedScheduler"]


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by ``factor`` (down to ``min_lr``) once the monitored value
    has not improved for more than ``patience`` steps, then wait ``cooldown``
    steps. "Improved" means below ``best * (1 - threshold)`` (``mode="min"``,
    ``threshold_mode="rel"``), ``best - threshold`` (``"abs"``), or above
    ``best * (1 + threshold)`` / ``best + threshold`` (``mode="max"``). A
    reduction by ``eps`` or less is skipped. Call ``step(metric)`` once per epoch.

    >>> sched = optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=3)
    >>> sched.step(val_loss)
    """

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr=0, eps: float = 1e-8):
        name = "ReduceLROnPlateau"
        _check_optimizer(name, optimizer)
        self.factor = _check_range(name, "factor", factor, 0, 1, open_high=True)
        self.optimizer = optimizer
        if isinstance(min_lr, (list, tuple)):
            self.default_min_lr = None
            self.min_lrs = _per_group(name, "min_lr", optimizer, min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        for v in self.min_lrs:
            _check_range(name, "min_lr", v, 0, None)
        self.patience = _check_int(name, "patience", patience, 0)
        self.cooldown = _check_int(name, "cooldown", cooldown, 0)
        self.eps = _check_range(name, "eps", eps, 0, None)
        _check_range(name, "threshold", threshold, 0, None)
        self.last_epoch = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]
        self._init_is_better(mode, threshold, threshold_mode)
        self._reset()

    def _reset(self):
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def _init_is_better(self, mode, threshold, threshold_mode):
        if mode not in ("min", "max"):
            raise ArgumentError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ArgumentError(f"ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', "
                                f"got {threshold_mode!r}")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode

    def _is_better(self, a, best):
        if self.mode == "min":
            if self.threshold_mode == "rel":
                return a < best * (1.0 - self.threshold)
            return a < best - self.threshold
        if self.threshold_mode == "rel":
            return a > best * (self.threshold + 1.0)
        return a > best + self.threshold

    @property
    def in_cooldown(self) -> bool:
        return self.cooldown_counter > 0

    def step(self, metrics) -> None:
        """Record this step's monitored value (a number or one-element Tensor)."""
        try:
            current = float(metrics)
        except (TypeError, ValueError) as exc:
            raise ArgumentTypeError(f"ReduceLROnPlateau.step: metrics must be a number (the "
                                    f"monitored value), got {type(metrics).__name__}") from exc
        self.last_epoch += 1
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _reduce_lr(self):
        groups = self.optimizer.param_groups
        if len(groups) != len(self.min_lrs):
            if self.default_min_lr is None:
                raise ArgumentError(f"ReduceLROnPlateau: the optimizer has {len(groups)} param "
                                    f"groups, min_lr has {len(self.min_lrs)} values")
            self.min_lrs = [self.default_min_lr] * len(groups)
        for g, min_lr in zip(groups, self.min_lrs):
            old = float(g["lr"])
            new = max(old * self.factor, min_lr)
            if old - new > self.eps:
                g["lr"] = new

    def get_lr(self):
        raise ArgumentError("ReduceLROnPlateau has no closed form; use get_last_lr()")

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._init_is_better(self.mode, self.threshold, self.threshold_mode)


def _check_children(name: str, schedulers: list, optimizer) -> None:
    if not schedulers:
        raise ArgumentError(f"{name} expects at least one scheduler, got none")
    for i, s in enumerate(schedulers):
        if not isinstance(s, LRScheduler):
            raise ArgumentTypeError(f"{name}: schedulers[{i}] is a {type(s).__name__}, not a "
                                    "learning-rate scheduler")
        if isinstance(s, ReduceLROnPlateau):
            raise ArgumentError(f"{name} does not support ReduceLROnPlateau (schedulers[{i}]): "
                                "its step() needs the monitored value; step it on its own")
        if s.optimizer is not optimizer:
            raise ArgumentError(f"{name}: schedulers[{i}] ({type(s).__name__}) drives a "
                                "different optimizer; all must share one")


class _Composite(LRScheduler):
    """State of a scheduler made of others: its own, plus theirs in order."""

    _not_state = LRScheduler._not_state + ("_schedulers",)

    def state_dict(self) -> dict:
        state = super().state_dict()
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict: dict) -> None:
        state = dict(state_dict)
        children = state.pop("_schedulers", None)
        if not isinstance(children, (list, tuple)) or len(children) != len(self._schedulers):
            n = len(children) if isinstance(children, (list, tuple)) else "no"
            raise StateDictError(f"{type(self).__name__}.load_state_dict: the state has {n} "
                                 f"scheduler states, this one {len(self._schedulers)} "
                                 "schedulers")
        for s, sd in zip(self._schedulers, children):
            s.load_state_dict(sd)
        super().load_state_dict(state)

    def get_lr(self):
        raise ArgumentError(f"{type(self).__name__} has no closed form; use get_last_lr()")


class SequentialLR(_Composite):
    """Run ``schedulers[0]`` until ``milestones[0]``, then ``schedulers[1]`` from its
    start, and so on (each milestone restarts the next one at its step 0).

    >>> warmup = optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=5)
    >>> cosine = optim.lr_scheduler.CosineAnnealingLR(opt, T_max=95)
    >>> sched = optim.lr_scheduler.SequentialLR(opt, [warmup, cosine], milestones=[5])
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        name = "SequentialLR"
        schedulers, milestones = list(schedulers), list(milestones)
        _check_children(name, schedulers, optimizer)
        for i, s in enumerate(schedulers):
            if isinstance(s, _Composite):
                raise ArgumentError(f"{name}: schedulers[{i}] is a {type(s).__name__}; "
                                    "SequentialLR cannot restart a composite scheduler at "
                                    "its milestone (PyTorch fails there too)")
            if s.last_epoch != 0:
                raise ArgumentError(f"{name}: schedulers[{i}] ({type(s).__name__}) is at "
                                    f"last_epoch={s.last_epoch}; pass freshly made schedulers "
                                    "(resume with load_state_dict)")
        if len(milestones) != len(schedulers) - 1:
            raise ArgumentError(f"{name}: expects one milestone fewer than schedulers, got "
                                f"{len(schedulers)} schedulers and milestones {milestones}")
        if not all(is_int(m) and m >= 1 for m in milestones) or milestones != sorted(
                set(milestones)):
            raise ArgumentError(f"{name}: milestones must be increasing ints >= 1, got "
                                f"{milestones}")
        if last_epoch != -1:
            raise ArgumentError(f"{name}: last_epoch={last_epoch} (resuming) is not "
                                "supported; make it fresh and restore it with "
                                "load_state_dict")
        self.optimizer = optimizer
        self._schedulers = schedulers
        self._milestones = [int(m) for m in milestones]
        self.last_epoch = 0
        # as PyTorch: undo every scheduler's first step, redo the first one's
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        for s in schedulers:
            s.last_epoch -= 1
        schedulers[0]._initial_step()
        self._last_lr = schedulers[0].get_last_lr()

    def step(self) -> None:
        """Step the scheduler whose turn it is (restarting it at its milestone)."""
        t = self.last_epoch + 1
        idx = bisect.bisect_right(self._milestones, t)
        s = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == t:
            s.step(0)
        else:
            s.step()
        self.last_epoch = t
        self._last_lr = s.get_last_lr()


class ChainedScheduler(_Composite):
    """Step every scheduler in turn on each ``step()``: their factors multiply
    (each acts on the lr the previous one set).

    >>> sched = optim.lr_scheduler.ChainedScheduler([
    ...     optim.lr_scheduler.ConstantLR(opt, factor=0.1, total_iters=2),
    ...     optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)])
    """

    def __init__(self, schedulers, optimizer=None):
        name = "ChainedScheduler"
        schedulers = list(schedulers)
        if optimizer is None and schedulers:
            optimizer = getattr(schedulers[0], "optimizer", None)
        _check_children(name, schedulers, optimizer)
        for i, s in enumerate(schedulers):
            if getattr(s, "_resumed", False):
                raise ArgumentError(f"{name}: schedulers[{i}] ({type(s).__name__}) was made "
                                    f"with last_epoch != -1, which sets its closed form and "
                                    "drops the others' factors; make the schedulers fresh and "
                                    "restore them with load_state_dict")
        self.optimizer = optimizer
        self._schedulers = schedulers
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def step(self) -> None:
        """Step each scheduler in order."""
        for s in self._schedulers:
            s.step()
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]
