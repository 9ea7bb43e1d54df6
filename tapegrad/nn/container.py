"""Sequential and ModuleList."""

from __future__ import annotations

from collections import OrderedDict

from ..errors import OutOfRangeError
from .module import Module

__all__ = ["Sequential", "ModuleList"]


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
