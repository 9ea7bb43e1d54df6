"""Optimizer base class: parameter groups, per-parameter state, state_dict.

Subclasses implement ``_update(p, grad, state, group)`` on raw arrays; the
base class runs it for every parameter with a gradient, in place, without
recording anything, and bumps each updated parameter's version once per step
(so a graph built before the step that saved the parameter refuses to run
backward with stale values).
"""

from __future__ import annotations

import fnmatch
from copy import deepcopy

from ..errors import ArgumentError
from ..nn.parameter import move_array
from ..tape import enable_grad, no_grad
from ..tensor import Tensor

__all__ = ["Optimizer", "required", "mult_param_groups"]


class _Required:
    def __repr__(self):
        return "<required>"


required = _Required()


class Optimizer:
    """Base of SGD, Adam, AdamW, RMSprop.

    ``params`` is an iterable of Tensors, or of dicts (param groups) each with
    ``"params"`` and any option overriding the defaults for that group, e.g.
    ``[{"params": convs}, {"params": biases, "lr": 0.02, "weight_decay": 0}]``.

    >>> opt.zero_grad(); loss.backward(); opt.step()
    """

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.state: dict = {}  # param -> dict (keyed by identity: Tensor hashes by id)
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):
            raise TypeError("params must be an iterable of Tensors or of dicts, got a single "
                            "Tensor: wrap it in a list, or pass model.parameters()")
        groups = list(params)
        if not groups:
            raise ArgumentError(f"{type(self).__name__}: got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for g in groups:
            self.add_param_group(g)

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, g in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines += [f"    {k}: {v}" for k, v in sorted(g.items()) if k != "params"]
        return "\n".join(lines) + "\n)"

    def add_param_group(self, group: dict) -> None:
        """Add a group (a dict with ``"params"`` and per-group options)."""
        if not isinstance(group, dict):
            raise TypeError(f"a param group must be a dict, got {type(group).__name__}")
        group = dict(group)
        params = group.get("params")
        if params is None:
            raise ArgumentError("a param group needs a 'params' entry")
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, got {type(p).__name__}")
            if not p.is_leaf:
                raise ArgumentError("optimizer can't optimize a non-leaf Tensor (one computed "
                                    "by an op); optimize the leaves (parameters) instead")
            if not p.requires_grad:
                raise ArgumentError(f"optimizer got a Tensor of shape {tuple(p.shape)} that "
                                    "does not require grad")
        group["params"] = params
        for k, v in self.defaults.items():
            if v is required and k not in group:
                raise ArgumentError(f"{type(self).__name__}: parameter group didn't specify "
                                    f"a value of required option {k!r}")
            group.setdefault(k, v)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params) or any(id(p) in seen for p in params):
            raise ArgumentError("some parameters appear in more than one parameter group "
                                "(or twice in one)")
        self._check_group(group)
        self.param_groups.append(group)

    def _check_group(self, group) -> None:
        """Subclasses validate option values here."""

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for p in g["params"]:
                if set_to_none or p.grad is None:
                    p.grad = None
                else:
                    p.grad.data[...] = 0

    def step(self, closure=None):
        """One update of every parameter that has a gradient. ``closure``
        (optional) recomputes and returns the loss, with grad enabled."""
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        with no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    state = self.state.setdefault(p, {})
                    with p.device.use():
                        self._update(p.data, p.grad.data, state, group)
                    p._version[0] += 1
        return loss

    def _update(self, p, grad, state, group) -> None:
        raise NotImplementedError

    # ----------------------------------------------------------------- state
    def state_dict(self) -> dict:
        """``{"state": {index: {...}}, "param_groups": [{..., "params": [index...]}]}``
        like PyTorch: parameters are referred to by their position across
        groups. Arrays are the live state (not copies); save them with
        :func:`tapegrad.save`."""
        index, groups, n = {}, [], 0
        for g in self.param_groups:
            ids = []
            for p in g["params"]:
                index[id(p)] = n
                ids.append(n)
                n += 1
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": ids})
        state = {index[id(p)]: dict(s) for p, s in self.state.items() if id(p) in index}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore options and state (copied, cast to each parameter's dtype and
        moved to its device). The groups must have the same sizes."""
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ArgumentError(f"load_state_dict: the state has {len(groups)} parameter "
                                f"groups, the optimizer {len(self.param_groups)}")
        for i, (mine, theirs) in enumerate(zip(self.param_groups, groups)):
            if len(mine["params"]) != len(theirs["params"]):
                raise ArgumentError(f"load_state_dict: group {i} has {len(theirs['params'])} "
                                    f"parameters in the state, {len(mine['params'])} here")
        by_index = {}
        for mine, theirs in zip(self.param_groups, groups):
            for idx, p in zip(theirs["params"], mine["params"]):
                by_index[idx] = p
        saved = {int(k): v for k, v in state_dict["state"].items()}
        new_state = {}
        for idx, s in saved.items():
            p = by_index.get(idx)
            if p is None:
                continue
            new_state[p] = {k: self._cast_state(k, v, p) for k, v in s.items()}
        for mine, theirs in zip(self.param_groups, groups):
            for k, v in theirs.items():
                if k != "params":
                    mine[k] = tuple(v) if isinstance(v, list) else deepcopy(v)
        self.state = new_state

    @staticmethod
    def _cast_state(key, value, p):
        if isinstance(value, Tensor):
            value = value.data
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            if value.ndim == 0 and key == "step":
                return int(value.item())
            dt = p.dtype if value.dtype.kind == "f" else None
            arr = move_array(value, p.device, dt)
            return arr.copy() if arr is value else arr
        if hasattr(value, "item"):
            return value.item()
        return deepcopy(value)

def mult_param_groups(module, lr: float, weight_decay: float = 0.0, lr_mult=None,
                      decay_mult=None) -> list[dict]:
    """Caffe's ``lr_mult`` / ``decay_mult`` as optimizer param groups.

    ``lr_mult`` and ``decay_mult`` map glob patterns over parameter names
    (``"*.bias"``, ``"conv1.*"``) to multipliers; the first matching pattern
    wins, unmatched parameters get 1. Each distinct (lr_mult, decay_mult)
    pair becomes one group with ``lr = lr * lr_mult`` and ``weight_decay =
    weight_decay * decay_mult``; schedulers then scale every group's own lr,
    as Caffe does. ``lr_mult`` 0 freezes a parameter (it is left out).

    >>> groups = optim.mult_param_groups(net, lr=0.01, weight_decay=5e-4,
    ...                                  lr_mult={"*.bias": 2}, decay_mult={"*.bias": 0})
    >>> opt = optim.SGD(groups, lr=0.01, momentum=0.9)
    """
    lr_mult = lr_mult or {}
    decay_mult = decay_mult or {}

    def lookup(table, name):
        for pattern, mult in table.items():
            if fnmatch.fnmatchcase(name, pattern):
                return float(mult)
        return 1.0

    groups: dict[tuple, dict] = {}
    for name, p in module.named_parameters():
        if not p.requires_grad:
            continue
        lm, dm = lookup(lr_mult, name), lookup(decay_mult, name)
        if lm == 0.0:
            continue
        g = groups.setdefault((lm, dm), {"params": [], "lr": lr * lm,
                                         "weight_decay": weight_decay * dm,
                                         "lr_mult": lm, "decay_mult": dm})
        g["params"].append(p)
    return list(groups.values())
