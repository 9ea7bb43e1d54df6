"""Optimizer base class: parameter groups, per-parameter state, state_dict.

Subclasses implement ``_update(p, grad, state, group)`` on raw arrays; the
base class runs it for every parameter with a gradient, in place, without
recording anything, and bumps each updated parameter's version once per step
(so a graph built before the step that saved the parameter refuses to run
backward with stale values).
"""

from __future__ import annotations

import fnmatch
import inspect
import math
import numbers
from copy import deepcopy

import numpy as np

from ..device import get_array_module, kernels
from ..errors import ArgumentError, ArgumentTypeError, StateDictError, describe
from ..nn.parameter import move_array
from ..tape import enable_grad, no_grad
from ..tensor import Tensor

__all__ = ["Optimizer", "required", "mult_param_groups"]


def _on_cuda(p, g) -> bool:
    """Whether a fused CUDA update kernel applies: a CuPy parameter whose gradient has
    its dtype (NumPy arrays answer at the first test)."""
    return type(p) is not np.ndarray and g.dtype == p.dtype and \
        kernels.on_cuda(get_array_module(p))


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
            raise ArgumentTypeError("params must be an iterable of Tensors or of dicts, got a "
                                    "single Tensor: wrap it in a list, or pass "
                                    "model.parameters()")
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
            raise ArgumentTypeError(f"a param group must be a dict, got "
                                    f"{type(group).__name__}")
        group = dict(group)
        params = group.get("params")
        if params is None:
            raise ArgumentError("a param group needs a 'params' entry")
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise ArgumentTypeError(f"optimizer can only optimize Tensors, got "
                                        f"{type(p).__name__}")
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
        problems = self._option_problems(group)
        if problems:
            raise ArgumentError(f"{type(self).__name__}: " + "; ".join(problems))
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
                    p.grad.array[...] = 0

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
                        self._update(p.array, p.grad.array, state, group)
                    p._bump_version()
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
        moved to its device). Everything is checked first -- the groups and
        their sizes, each option's type and value, each parameter's state
        entries, buffer shapes and dtypes, step counts -- and on any problem a
        :class:`StateDictError` lists them all and nothing changes."""
        groups, saved = self._check_layout(state_dict)
        problems, options, by_index = [], [], {}
        for i, (mine, theirs) in enumerate(zip(self.param_groups, groups)):
            problems += self._check_saved_group(i, mine, theirs, options, by_index)
        states = {}
        for key, s in saved.items():
            idx = int(key) if isinstance(key, str) and key.isdecimal() else key
            if idx not in by_index or isinstance(idx, bool) or idx in states:
                problems.append(f"state for parameter index {key!r}, which no group lists "
                                "(or listed twice)")
                continue
            problems += self._check_param_state(s, *by_index[idx])
            states[idx] = s
        if problems:
            raise self._load_error(problems)
        new_state = {}
        for idx, s in states.items():
            p = by_index[idx][0]
            new_state[p] = {k: self._cast_state(k, v, p) for k, v in s.items()}
        for mine, opts in zip(self.param_groups, options):
            mine.update(opts)
        self.state = new_state

    # Per-parameter state a subclass keeps, declared so that load_state_dict can
    # check it: arrays shaped like the parameter, step counters (ints >= 0), and
    # the entries a non-empty state may lack (created when first needed).
    _state_buffers: tuple[str, ...] = ()
    _state_counters: tuple[str, ...] = ()
    _lazy_state: tuple[str, ...] = ()

    def _load_error(self, problems):
        return StateDictError(f"{type(self).__name__}.load_state_dict failed (nothing was "
                              "loaded):\n  " + "\n  ".join(problems))

    def _check_layout(self, sd):
        if not isinstance(sd, dict) or set(sd) != {"state", "param_groups"}:
            keys = sorted(map(str, sd)) if isinstance(sd, dict) else type(sd).__name__
            raise self._load_error([f"expected a dict with 'state' and 'param_groups' (from "
                                    f"optimizer.state_dict()), got {keys}"])
        groups, saved = sd["param_groups"], sd["state"]
        if not isinstance(groups, (list, tuple)) or not all(isinstance(g, dict) for g in groups):
            raise self._load_error(["'param_groups' must be a list of dicts"])
        if not isinstance(saved, dict):
            raise self._load_error([f"'state' must be a dict, got {type(saved).__name__}"])
        if len(groups) != len(self.param_groups):
            raise self._load_error([f"the state has {len(groups)} parameter groups, the "
                                    f"optimizer {len(self.param_groups)}"])
        return groups, saved

    def _check_saved_group(self, i, mine, theirs, options, by_index):
        """Problems of saved group ``i``; its options go to ``options`` and its
        parameter indices to ``by_index`` (index -> (param, description))."""
        ids = theirs.get("params")
        if not isinstance(ids, (list, tuple)) or len(ids) != len(mine["params"]):
            n = len(ids) if isinstance(ids, (list, tuple)) else repr(ids)
            return [f"group {i} has {n} parameters in the state, {len(mine['params'])} here"]
        problems = []
        for j, (idx, p) in enumerate(zip(ids, mine["params"])):
            if not isinstance(idx, int) or isinstance(idx, bool) or idx in by_index:
                problems.append(f"group {i} lists parameter index {idx!r} (not an int, or "
                                "repeated)")
            else:
                by_index[idx] = (p, f"group {i} parameter {j} (shape {tuple(p.shape)})")
        opts = {k: tuple(v) if isinstance(v, list) else deepcopy(v)
                for k, v in theirs.items() if k != "params"}
        found = self._option_problems(opts)
        if not found:
            try:
                self._check_group({**mine, **opts})
            except ArgumentError as exc:
                found = [str(exc)]
        options.append(opts)
        return problems + [f"group {i}: {msg}" for msg in found]

    def _check_param_state(self, s, p, where):
        if not isinstance(s, dict):
            return [f"{where}: state is a {type(s).__name__}, not a dict"]
        known = self._state_buffers + self._state_counters
        problems = [f"{where}: unexpected state entry {k!r} ({type(self).__name__} keeps "
                    f"{', '.join(known) or 'none'})" for k in s if k not in known]
        if s:
            problems += [f"{where}: missing state entry {k!r}" for k in known
                         if k not in s and k not in self._lazy_state]
        for k in self._state_counters:
            v = s.get(k, 0)
            v = v.array if isinstance(v, Tensor) else v
            if getattr(v, "shape", None) == () and getattr(v, "dtype", None) is not None \
                    and v.dtype.kind in "iu":
                v = int(v)
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 0:
                problems.append(f"{where}: {k!r} must be an int >= 0, got {s[k]!r}")
        for k in self._state_buffers:
            if k not in s:
                continue
            v = s[k].array if isinstance(s[k], Tensor) else s[k]
            shape, dtype = getattr(v, "shape", None), getattr(v, "dtype", None)
            if shape is None or not isinstance(dtype, np.dtype) or dtype.kind != "f":
                problems.append(f"{where}: {k!r} must be a float array, got "
                                f"{describe(v)}")
            elif tuple(shape) != tuple(p.shape):
                problems.append(f"{where}: {k!r} has shape {tuple(shape)}, the parameter "
                                f"has {tuple(p.shape)}")
        return problems

    def _option_problems(self, group) -> list[str]:
        """Options missing from ``group`` or of the wrong type, judged by the
        constructor's defaults: bools, numbers (finite), tuples of numbers."""
        problems = []
        declared = {k: prm.default for k, prm in
                    inspect.signature(type(self).__init__).parameters.items()}
        for k in self.defaults:
            if k not in group:
                problems.append(f"missing option {k!r}")
                continue
            v, default = group[k], declared.get(k)
            if isinstance(default, bool):
                ok, want = isinstance(v, (bool, np.bool_)), "a bool"
            elif isinstance(default, tuple):
                ok = (isinstance(v, (tuple, list)) and len(v) == len(default)
                      and all(_finite_number(x) for x in v))
                want = f"{len(default)} finite numbers"
            elif isinstance(default, numbers.Real) or default is required:
                ok, want = _finite_number(v), "a finite number"
            else:
                continue
            if not ok:
                problems.append(f"option {k!r} must be {want}, got {v!r}")
        return problems

    def _cast_state(self, key, value, p):
        if isinstance(value, Tensor):
            value = value.array
        if key in self._state_counters:
            return int(value)
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            dt = p.dtype if value.dtype.kind == "f" else None
            arr = move_array(value, p.device, dt)
            return arr.copy() if arr is value else arr
        if hasattr(value, "item"):
            return value.item()
        return deepcopy(value)


def _finite_number(v) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


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
