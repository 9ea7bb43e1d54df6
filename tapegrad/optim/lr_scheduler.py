"""Learning-rate schedules (PyTorch's and Caffe's policies).

Call ``scheduler.step()`` once per epoch (or per iteration, for Caffe-style
``PolyLR``/``InvLR``), after ``optimizer.step()``. Each scheduler sets every
group's ``lr`` from that group's base lr (its lr when the scheduler was made,
kept as ``group["initial_lr"]``) and the step count ``t = last_epoch``, with a
closed form, so per-group lr multipliers are preserved. One scheduler per
optimizer: stacking two on the same groups is not supported.

=====================  =============================================
``StepLR``             ``base * gamma ** (t // step_size)``
``MultiStepLR``        ``base * gamma ** (number of milestones <= t)``
``ExponentialLR``      ``base * gamma ** t``
``CosineAnnealingLR``  ``eta_min + (base - eta_min) * (1 + cos(pi t / T_max)) / 2``
``LambdaLR``           ``base * lr_lambda(t)``
``PolyLR`` (Caffe)     ``base * (1 - min(t, max_iter) / max_iter) ** power``
``InvLR`` (Caffe)      ``base * (1 + gamma * t) ** (-power)``
=====================  =============================================
"""

from __future__ import annotations

import bisect
import math

from ..errors import ArgumentError

__all__ = ["LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR",
           "LambdaLR", "PolyLR", "InvLR"]


class LRScheduler:
    """Base class: subclasses define ``lr_at(base_lr, t)``."""

    def __init__(self, optimizer, last_epoch: int = -1):
        self.optimizer = optimizer
        for i, g in enumerate(optimizer.param_groups):
            if last_epoch == -1:
                g.setdefault("initial_lr", g["lr"])
            elif "initial_lr" not in g:
                raise ArgumentError(f"{type(self).__name__}: resuming at last_epoch="
                                    f"{last_epoch} needs 'initial_lr' in param group {i}")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self.step()

    def lr_at(self, base_lr: float, t: int, group_index: int) -> float:
        raise NotImplementedError

    def get_lr(self) -> list[float]:
        return [self.lr_at(b, self.last_epoch, i) for i, b in enumerate(self.base_lrs)]

    def get_last_lr(self) -> list[float]:
        """The lrs set by the latest ``step()``."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance one step (or jump to ``epoch``) and set the groups' lrs."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        lrs = self.get_lr()
        for g, lr in zip(self.optimizer.param_groups, lrs):
            g["lr"] = lr
        self._last_lr = lrs

    def state_dict(self) -> dict:
        """Everything but the optimizer (and functions, which cannot be saved)."""
        return {k: v for k, v in self.__dict__.items()
                if k != "optimizer" and not callable(v) and k != "lr_lambdas"}

    def load_state_dict(self, state_dict: dict) -> None:
        for k, v in state_dict.items():
            self.__dict__[k] = list(v) if isinstance(v, tuple) else v


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` steps (Caffe's ``step``)."""

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        if step_size < 1:
            raise ArgumentError(f"StepLR: step_size must be >= 1, got {step_size}")
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * self.gamma ** (t // self.step_size)


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each milestone (Caffe's ``multistep``)."""

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, t)


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every step (Caffe's ``exp``)."""

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * self.gamma ** t


class CosineAnnealingLR(LRScheduler):
    """Half a cosine from the base lr down to ``eta_min`` over ``T_max`` steps
    (SGDR without restarts); it rises again after ``T_max``."""

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        if T_max < 1:
            raise ArgumentError(f"CosineAnnealingLR: T_max must be >= 1, got {T_max}")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        cos = math.cos(math.pi * t / self.T_max)
        return self.eta_min + (base_lr - self.eta_min) * (1 + cos) / 2


class LambdaLR(LRScheduler):
    """``base_lr * lr_lambda(t)``; one function, or one per param group.
    The functions are not part of ``state_dict``: pass them again on resume."""

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
    at ``max_iter`` (and staying there). Step it every iteration."""

    def __init__(self, optimizer, max_iter: int, power: float = 1.0, last_epoch: int = -1):
        if max_iter < 1:
            raise ArgumentError(f"PolyLR: max_iter must be >= 1, got {max_iter}")
        self.max_iter, self.power = int(max_iter), power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * (1 - min(t, self.max_iter) / self.max_iter) ** self.power


class InvLR(LRScheduler):
    """Caffe's ``inv`` policy: ``base * (1 + gamma * t) ** (-power)`` (LeNet's
    solver uses gamma=1e-4, power=0.75). Step it every iteration."""

    def __init__(self, optimizer, gamma: float, power: float, last_epoch: int = -1):
        self.gamma, self.power = gamma, power
        super().__init__(optimizer, last_epoch)

    def lr_at(self, base_lr, t, i):
        return base_lr * (1 + self.gamma * t) ** (-self.power)
