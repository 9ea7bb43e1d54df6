"""Module: the base class of layers and models (PyTorch's ``nn.Module`` API).

Assigning a :class:`Parameter`, a buffer Tensor (after ``register_buffer``)
or a Module to an attribute registers it; traversal, ``state_dict``,
``to(device)`` and ``train()/eval()`` follow the registrations.
"""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import numpy as np

from .. import memory_formats as mf
from ..device import get_device
from ..errors import ArgumentKeyError, ArgumentTypeError, DTypeError, StateDictError
from ..tape import no_grad
from ..tensor import Tensor
from .parameter import Parameter, move_array

__all__ = ["Module", "StateDictError", "IncompatibleKeys"]

IncompatibleKeys = namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])


def _shape(v) -> tuple:
    return tuple(getattr(v, "shape", np.shape(v)))


class Module:
    """Base class of every layer and model. Subclasses call ``super().__init__()``
    first, assign parameters/submodules as attributes, and define ``forward``.

    >>> class Net(nn.Module):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.fc = nn.Linear(4, 2)
    ...     def forward(self, x):
    ...         return self.fc(x).relu()
    """

    def __init__(self):
        d = self.__dict__
        d["training"] = True
        d["_parameters"] = OrderedDict()
        d["_buffers"] = OrderedDict()
        d["_non_persistent"] = set()
        d["_modules"] = OrderedDict()

    # ------------------------------------------------------------ registration
    def _registry(self, kind):
        try:
            return self.__dict__[kind]
        except KeyError:
            raise AttributeError(
                f"cannot assign to {type(self).__name__} before Module.__init__() has run: "
                "call super().__init__() first in your __init__") from None

    def __setattr__(self, name, value):
        params = self._registry("_parameters")
        buffers, modules = self.__dict__["_buffers"], self.__dict__["_modules"]
        if isinstance(value, Parameter):
            if name not in params:  # replacing keeps the registration order
                self._forget(name)
            params[name] = value
        elif isinstance(value, Module):
            if name not in modules:
                self._forget(name)
            modules[name] = value
        elif name in params:
            if value is not None:
                raise ArgumentTypeError(
                    f"cannot assign {type(value).__name__} to parameter {name!r} of "
                    f"{type(self).__name__}: wrap it as nn.Parameter(...) (or assign None)")
            params[name] = None
        elif name in buffers:
            if value is not None and not isinstance(value, Tensor):
                raise ArgumentTypeError(f"cannot assign {type(value).__name__} to buffer "
                                        f"{name!r}: expected a Tensor or None")
            buffers[name] = value
        elif name in modules:
            if value is not None:
                raise ArgumentTypeError(f"cannot assign {type(value).__name__} to submodule "
                                        f"{name!r}: expected a Module or None")
            modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name):
        for kind in ("_parameters", "_buffers", "_modules"):
            self.__dict__[kind].pop(name, None)
        self.__dict__.pop(name, None)
        self.__dict__["_non_persistent"].discard(name)

    def __getattr__(self, name):  # only called when normal lookup fails
        d = self.__dict__
        for kind in ("_parameters", "_buffers", "_modules"):
            reg = d.get(kind)
            if reg is not None and name in reg:
                return reg[name]
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def __delattr__(self, name):
        for kind in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__[kind]:
                del self.__dict__[kind][name]
                self.__dict__["_non_persistent"].discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        d = self.__dict__
        return sorted(set(super().__dir__()) | set(d["_parameters"]) | set(d["_buffers"])
                      | set(d["_modules"]))

    def register_parameter(self, name: str, param) -> None:
        if param is not None and not isinstance(param, Parameter):
            raise ArgumentTypeError(f"register_parameter: {name!r} must be a Parameter or None, "
                                    f"got {type(param).__name__}")
        self._check_name(name)
        self._forget(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor, persistent: bool = True) -> None:
        """State that is not trained but saved and moved with the module
        (BatchNorm's running statistics). ``persistent=False`` keeps it out
        of ``state_dict``."""
        if tensor is not None and not isinstance(tensor, Tensor):
            raise ArgumentTypeError(f"register_buffer: {name!r} must be a Tensor or None, got "
                                    f"{type(tensor).__name__}")
        self._check_name(name)
        self._forget(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module) -> None:
        if module is not None and not isinstance(module, Module):
            raise ArgumentTypeError(f"add_module: {name!r} must be a Module or None, got "
                                    f"{type(module).__name__}")
        self._check_name(name)
        self._forget(name)
        self._modules[name] = module

    register_module = add_module

    def _check_name(self, name):
        self._registry("_parameters")
        if not isinstance(name, str) or not name or "." in name:
            raise ArgumentKeyError(f"invalid attribute name {name!r}: a non-empty string "
                                   "without '.'")

    # --------------------------------------------------------------- traversal
    def named_modules(self, memo=None, prefix: str = ""):
        """Yield ``(dotted_name, module)`` for this module and all below, each once."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, m in self._modules.items():
            if m is not None:
                yield from m.named_modules(memo, f"{prefix}.{name}" if prefix else name)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and id(m) not in seen:
                seen.add(id(m))
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named_members(self, kind, prefix, recurse):
        seen = set()  # by identity: Tensor.__eq__ is elementwise
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mprefix, m in mods:
            for name, v in m.__dict__[kind].items():
                if v is None or id(v) in seen:
                    continue
                seen.add(id(v))
                yield (f"{mprefix}.{name}" if mprefix else name), v

    def named_parameters(self, prefix: str = "", recurse: bool = True):
        yield from self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True):
        yield from self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    def apply(self, fn):
        """Call ``fn(m)`` on every submodule (children first), then on self."""
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    # ---------------------------------------------------------------- modes
    def train(self, mode: bool = True):
        """Training mode (dropout active, BatchNorm uses batch statistics)."""
        if not isinstance(mode, bool):
            raise ArgumentTypeError(f"train(mode): mode must be a bool, got {type(mode).__name__}")
        for m in self.modules():
            m.__dict__["training"] = mode
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Drop every parameter's gradient (``set_to_none=False`` zeroes it instead)."""
        for p in self.parameters():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad.array[...] = 0

    # -------------------------------------------------------------- forward
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ---------------------------------------------------------------- state
    def state_dict(self, destination=None, prefix: str = "", keep_vars: bool = False):
        """Ordered ``{dotted_name: Tensor}`` of parameters and persistent buffers.

        Values are detached Tensors sharing the module's arrays (no copy);
        ``keep_vars=True`` gives the Parameters themselves.
        """
        out = OrderedDict() if destination is None else destination
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m.state_dict(out, prefix + name + ".", keep_vars)
        return out

    def _state_targets(self):
        """``{dotted_name: tensor}`` of everything state_dict would hold (live objects)."""
        return self.state_dict(keep_vars=True)

    def load_state_dict(self, state_dict, strict: bool = True):
        """Copy values from ``state_dict`` into the parameters and buffers.

        Everything is checked first (missing and unexpected keys when
        ``strict``, shapes always); on any problem a :class:`StateDictError`
        lists them all and the module is left untouched. Values are cast to
        each parameter's dtype and copied to its device. Returns
        ``(missing_keys, unexpected_keys)``.
        """
        if not hasattr(state_dict, "keys"):
            raise ArgumentTypeError(f"load_state_dict: expected a dict, got "
                                    f"{type(state_dict).__name__}")
        targets = self._state_targets()
        missing = [k for k in targets if k not in state_dict]
        unexpected = [k for k in state_dict if k not in targets]
        problems = []
        if strict:
            problems += [f"missing key {k!r} (model has shape {_shape(targets[k])})"
                         for k in missing]
            problems += [f"unexpected key {k!r} (checkpoint has shape {_shape(state_dict[k])})"
                         for k in unexpected]
        plan = []
        for k, t in targets.items():
            if k not in state_dict:
                continue
            v = state_dict[k]
            if not isinstance(v, Tensor) and not hasattr(v, "shape"):
                try:
                    v = np.asarray(v)
                except Exception:  # noqa: BLE001 - reported below
                    v = None
                if v is None or v.dtype == object:
                    problems.append(f"value for {k!r} is a {type(state_dict[k]).__name__}, "
                                    "not a Tensor or array")
                    continue
            if _shape(v) != tuple(t.shape):
                problems.append(f"size mismatch for {k!r}: checkpoint has shape {_shape(v)}, "
                                f"model has shape {tuple(t.shape)}")
                continue
            plan.append((t, v))
        if problems:
            raise StateDictError(f"load_state_dict into {type(self).__name__} failed (nothing "
                                 "was loaded):\n  " + "\n  ".join(problems))
        # convert everything before writing anything, so a failure leaves no half-load
        arrays = [move_array(v.array if isinstance(v, Tensor) else v, t.device, t.dtype)
                  for t, v in plan]
        with no_grad():
            for (t, _), a in zip(plan, arrays):
                t.array[...] = a
                t._bump_version()
        return IncompatibleKeys(missing, unexpected)

    # -------------------------------------------------------------- devices
    def to(self, device=None, dtype=None, memory_format=None):
        """Move (and/or cast floating) parameters, gradients and buffers in place:
        the Parameter objects stay the same, so optimizers built before still
        hold them. Returns self. ``memory_format``: lays out the 4-D and 5-D ones (conv
        weights) in that format (``tapegrad.channels_last``: NHWC), as PyTorch; see
        :mod:`tapegrad.memory_formats`."""
        mf.check_memory_format("Module.to", memory_format)
        fmt = None if memory_format is mf.preserve_format else memory_format
        dev = get_device(device) if device is not None else None
        dt = np.dtype(dtype) if dtype is not None else None
        if dt is not None and dt.kind != "f":
            raise DTypeError(f"Module.to: dtype must be floating, got {dt}")
        tensors = list(self.parameters()) + list(self.buffers())
        for t in tensors:  # all checked before any moves: a refusal changes nothing
            if fmt is not None and t.ndim in (4, 5):
                mf.check_rank(f"Module.to (a {tuple(t.shape)} parameter or buffer)", fmt,
                              t.ndim)
        with no_grad():
            for t in tensors:
                f = fmt if t.ndim in (4, 5) else None
                _move_in_place(t, dev, dt, f)
                if t.grad is not None:
                    _move_in_place(t.grad, dev, dt, f)
        return self

    def cpu(self):
        return self.to("cpu")

    def cuda(self, index: int = 0):
        return self.to(f"cuda:{index}")

    def float(self):
        return self.to(dtype=np.float32)

    def double(self):
        return self.to(dtype=np.float64)

    # ----------------------------------------------------------------- repr
    def extra_repr(self) -> str:
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines = extra.split("\n")
        for name, m in self._modules.items():
            body = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {body}")
        head = type(self).__name__ + "("
        if not lines:
            return head + ")"
        if len(lines) == 1 and not self._modules:
            return head + lines[0] + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


def _move_in_place(t, dev, dt, fmt=None):
    """Move ``t``'s array to ``dev`` (floating ones cast to ``dt``) in ``fmt``'s layout
    (None: its own, channels-last kept across devices)."""
    target = dev if dev is not None else t.device
    cast = dt if (dt is not None and t.dtype.kind == "f") else None
    keep = mf.suggested(t.array) if fmt is None else fmt
    new = move_array(t.array, target, cast)
    if keep is not mf.contiguous_format or fmt is not None:
        with target.use():
            new = mf.as_format(target.xp, new, keep)
    if new is not t.array:
        t.array = new
        t.device = target
        t._bump_version()  # a graph that saved the old array must not run backward
