"""Containers: Sequential, ModuleList, ModuleDict, ParameterList, ParameterDict."""

from __future__ import annotations

from collections import OrderedDict

from ..errors import ArgumentKeyError, ArgumentTypeError, OutOfRangeError
from .module import Module
from .parameter import Parameter

__all__ = ["Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict"]


class _IndexedModules(Module):
    """Children named "0", "1", ...; indexable, sliceable, sized, iterable."""

    def _index(self, idx: int) -> int:
        n = len(self)
        if not -n <= idx < n:
            raise OutOfRangeError(f"index {idx} is out of range for {type(self).__name__} of "
                                  f"length {n}")
        return idx % n

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return type(self)(*mods[idx]) if isinstance(self, Sequential) else \
                type(self)(mods[idx])
        return mods[self._index(idx)]

    def __setitem__(self, idx, module):
        key = list(self._modules)[self._index(idx)]
        setattr(self, key, module)

    def __delitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            del mods[idx]
        else:
            del mods[self._index(idx)]
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index: int, module):
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(mods):
            self.add_module(str(i), m)


class Sequential(_IndexedModules):
    """Modules applied in order: ``nn.Sequential(nn.Linear(4, 8), nn.ReLU())``.

    An ``OrderedDict`` argument names the children instead of numbering them.

    >>> model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    """

    def __init__(self, *modules):
        super().__init__()
        if len(modules) == 1 and isinstance(modules[0], OrderedDict):
            for name, m in modules[0].items():
                self.add_module(name, m)
        else:
            for i, m in enumerate(modules):
                self.add_module(str(i), m)

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class ModuleList(_IndexedModules):
    """A list of submodules, registered (so their parameters are found) but
    not called: the owner's ``forward`` decides how to use them.

    >>> blocks = nn.ModuleList([nn.Linear(8, 8) for _ in range(3)])
    """

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ModuleList has no forward(); iterate over it instead")


class ModuleDict(Module):
    """Submodules by name, registered in insertion order (PyTorch's ``nn.ModuleDict``).

    >>> heads = nn.ModuleDict({"cls": nn.Linear(8, 10), "box": nn.Linear(8, 4)})
    """

    _kind = "_modules"

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def _put(self, key, value):
        self.add_module(key, value)

    def __getitem__(self, key):
        try:
            return getattr(self, self._kind)[key]
        except KeyError:
            raise ArgumentKeyError(f"{type(self).__name__} has no key {key!r} (keys: "
                                   f"{list(self.keys())})") from None

    def __setitem__(self, key, value):
        self._put(key, value)

    def __delitem__(self, key):
        self[key]  # noqa: B018  (the clear error for a missing key)
        del getattr(self, self._kind)[key]

    def __len__(self):
        return len(getattr(self, self._kind))

    def __iter__(self):
        return iter(getattr(self, self._kind))

    def __contains__(self, key):
        return key in getattr(self, self._kind)

    def keys(self):
        return getattr(self, self._kind).keys()

    def values(self):
        return getattr(self, self._kind).values()

    def items(self):
        return getattr(self, self._kind).items()

    def pop(self, key):
        value = self[key]
        del self[key]
        return value

    def clear(self):
        getattr(self, self._kind).clear()

    def update(self, items):
        """From a mapping or an iterable of ``(key, value)`` pairs."""
        pairs = items.items() if hasattr(items, "items") else items
        for pair in pairs:
            if not isinstance(pair, (tuple, list)) or len(pair) != 2:
                raise ArgumentTypeError(f"{type(self).__name__}.update: expected a mapping or "
                                        f"(key, value) pairs, got {pair!r}")
            self._put(*pair)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} has no forward(); index it instead")


class ParameterDict(ModuleDict):
    """Parameters by name (PyTorch's ``nn.ParameterDict``); a Tensor that is not a
    Parameter is wrapped in one (sharing its array), as PyTorch does.

    >>> scales = nn.ParameterDict({"a": nn.Parameter(tapegrad.ones(3))})
    """

    _kind = "_parameters"

    def update(self, items):
        """As PyTorch's: a plain dict is taken in sorted key order; an OrderedDict,
        a ParameterDict or ``(key, value)`` pairs in their own order."""
        if isinstance(items, dict) and not isinstance(items, OrderedDict):
            items = sorted(items.items())
        super().update(items)

    def _put(self, key, value):
        self.register_parameter(key, _as_parameter(type(self).__name__, value))


class ParameterList(_IndexedModules):
    """A list of parameters, registered as ``"0"``, ``"1"``, ... (PyTorch's
    ``nn.ParameterList``).

    >>> weights = nn.ParameterList([nn.Parameter(tapegrad.randn(4, 4)) for _ in range(3)])
    """

    def __init__(self, values=None):
        super().__init__()
        if values is not None:
            self.extend(values)

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())

    def __getitem__(self, idx):
        params = list(self._parameters.values())
        if isinstance(idx, slice):
            return ParameterList(params[idx])
        return params[self._index(idx)]

    def __setitem__(self, idx, value):
        key = list(self._parameters)[self._index(idx)]
        self.register_parameter(key, _as_parameter("ParameterList", value))

    def __delitem__(self, idx):
        params = list(self._parameters.values())
        del params[idx if isinstance(idx, slice) else self._index(idx)]
        self._renumber(params)

    def append(self, value):
        self.register_parameter(str(len(self)), _as_parameter("ParameterList", value))
        return self

    def insert(self, index: int, value):
        params = list(self._parameters.values())
        params.insert(index, _as_parameter("ParameterList", value))
        self._renumber(params)

    def _renumber(self, params):
        self._parameters.clear()
        for i, p in enumerate(params):
            self.register_parameter(str(i), p)

    def forward(self, *args, **kwargs):
        raise NotImplementedError("ParameterList has no forward(); iterate over it instead")


def _as_parameter(owner, value):
    from ..tensor import Tensor

    if isinstance(value, Parameter):
        return value
    if isinstance(value, Tensor):
        return Parameter(value)
    raise ArgumentTypeError(f"{owner}: expected a Parameter or Tensor, got "
                            f"{type(value).__name__}")
