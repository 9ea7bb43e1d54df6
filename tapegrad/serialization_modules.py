"""Whole modules in tapegrad checkpoints (``tapegrad.save(model, f)``), and the
allow-list of the classes and functions a checkpoint may name.

:mod:`tapegrad.serialization` calls in here for the node kinds a module tree adds
to its JSON metadata (format version 2); everything else about the file (the
archive, the arrays, the limits) is that module's.

A module is stored as its class's name (``"module.qualname"``), its training
flag, its registries (parameters, buffers and their persistence, submodules) and
its other attributes, each ``[name, value]``::

    {"$module": "tapegrad.nn.linear.Linear", "training": true,
     "parameters": [["weight", {"$parameter": "weight", "requires_grad": true}], ...],
     "buffers": [], "non_persistent": [], "modules": [],
     "attributes": [["in_features", 4], ["out_features", 2]]}

A module or tensor met a second time inside a module tree is a reference
(``{"$module_ref": n}``: the n-th module in the file's order; ``{"$tensor_ref":
entry}``), so shared layers and tied weights stay shared. Functions and classes
are names (``{"$global": "tapegrad.ops.activation.relu"}``), dtypes and devices
their strings (``{"$dtype": "float32"}``, ``{"$device": "cuda:0"}``).

Loading never imports by name: a name is only looked up in the allow-list, which
is every class defined in ``tapegrad.nn`` (and its subpackages), the functions of
``tapegrad.ops`` and ``tapegrad.nn.functional``, and what
:func:`add_safe_globals` registered. With ``weights_only=True`` (the default of
``load``, as PyTorch 2.6+) only the registered ones are taken. With
``weights_only=False`` a module class may also be one that a module already loaded
in this process defines (``__main__.Net`` in the script that defines ``Net``, as
PyTorch's unpickler finds it), still without importing anything: only nn.Module
subclasses are taken that way, never functions or other classes.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import pkgutil
import re
import sys
import types

import numpy as np

from .device import Device, get_device
from .errors import ArgumentTypeError, DeviceError, SerializationError
from .nn.module import Module
from .nn.parameter import Parameter

__all__ = ["add_safe_globals", "get_safe_globals", "clear_safe_globals", "safe_globals"]

FIELDS = ("parameters", "buffers", "modules", "attributes")  # stored and read in this order
_MODULE_KEYS = sorted(["$module", "training", "non_persistent", *FIELDS])
_SLOTS = {"parameters": ("$parameter", "$tensor_ref"),
          "buffers": ("$tensor", "$parameter", "$tensor_ref"),
          "modules": ("$module", "$module_ref")}
_DTYPES = {np.dtype(n).name for n in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                      "uint16", "uint32", "uint64", "float16", "float32",
                                      "float64", "complex64", "complex128")}
_DEVICE = re.compile(r"cpu|cuda(:[0-9]{1,6})?")


def _internal_keys():
    """What ``Module.__init__`` puts in ``__dict__``: the registries, the training
    flag, and anything it gains later (hook tables), which a load makes afresh."""
    m = Module.__new__(Module)
    Module.__init__(m)
    return frozenset(m.__dict__)


_INTERNAL = _internal_keys()
_SAVED_INTERNAL = {"training", "_parameters", "_buffers", "_non_persistent", "_modules"}


def where(path):
    """A key path in messages: ``key encoder.layers.0.linear1``."""
    return "the top level" if not path else "key " + ".".join(str(p) for p in path)


# ---------------------------------------------------------------- allow-list
_registered: list = []  # what add_safe_globals got, in order
_builtin: dict | None = None


def _name(obj) -> str:
    return f"{getattr(obj, '__module__', None)}.{getattr(obj, '__qualname__', '?')}"


def _builtins() -> dict:
    """``{name: object}``: tapegrad.nn's classes, tapegrad.ops' and F's functions."""
    global _builtin
    if _builtin is None:
        from . import nn, ops
        from .nn import functional

        found = {}
        for info in pkgutil.walk_packages(nn.__path__, "tapegrad.nn.", onerror=lambda _: None):
            try:
                mod = importlib.import_module(info.name)
            except ImportError:  # a part that needs an optional dependency
                continue
            for obj in vars(mod).values():
                if isinstance(obj, type) and obj.__module__ == mod.__name__:
                    found[_name(obj)] = obj
        funcs = [getattr(ops, n) for n in ops.__all__] + list(vars(functional).values())
        for fn in funcs:
            if isinstance(fn, types.FunctionType) and fn.__module__.startswith("tapegrad."):
                found[_name(fn)] = fn
        _builtin = found
    return _builtin


def add_safe_globals(safe_globals) -> None:
    """Allow ``load`` to rebuild these classes (your ``nn.Module`` subclasses) and
    refer to these functions, PyTorch's ``torch.serialization.add_safe_globals``.

    Each item is a class or function, or ``(obj, "module.qualname")`` for an
    object saved under another name (a class a script defined in ``__main__``).

    >>> tapegrad.serialization.add_safe_globals([Net])
    >>> model = tapegrad.load("model.npz", weights_only=False)
    """
    if not isinstance(safe_globals, (list, tuple)):
        raise ArgumentTypeError(f"add_safe_globals: expected a list of classes/functions, "
                                f"got {type(safe_globals).__name__}")
    for item in safe_globals:
        obj, name = item if isinstance(item, tuple) and len(item) == 2 else (item, None)
        if not callable(obj) or (name is not None and not isinstance(name, str)):
            raise ArgumentTypeError(f"add_safe_globals: {item!r} is not a class, a function, "
                                    "or a (class or function, 'module.qualname') pair")
    _registered.extend(safe_globals)


def get_safe_globals() -> list:
    """What :func:`add_safe_globals` registered (tapegrad's own are not listed)."""
    return list(_registered)


def clear_safe_globals() -> None:
    """Forget everything :func:`add_safe_globals` registered."""
    _registered.clear()


@contextlib.contextmanager
def safe_globals(safe_globals):
    """Register ``safe_globals`` for the ``with`` block only.

    >>> with tapegrad.serialization.safe_globals([Net]):
    ...     model = tapegrad.load("model.npz", weights_only=False)
    """
    before = list(_registered)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _registered[:] = before


def _resolve(name, weights_only):
    for item in reversed(_registered):
        obj, as_name = item if isinstance(item, tuple) else (item, _name(item))
        if as_name == name:
            return obj
    if weights_only:
        return None
    return _builtins().get(name) or _loaded_module_class(name)


def _loaded_module_class(name):
    """With ``weights_only=False`` (PyTorch's opt-in to trusting the file), the
    nn.Module subclass a module already loaded in this process defines under
    ``name`` -- ``__main__.Net`` in the script that defines Net, as PyTorch finds it.
    Nothing is imported, and nothing but a Module subclass is taken."""
    mod, _, qual = name.rpartition(".")
    obj = getattr(sys.modules.get(mod), qual, None) if mod else None
    return obj if isinstance(obj, type) and issubclass(obj, Module) else None


# ------------------------------------------------------------------ save
class Encoding:
    """What one save tracks across a file's module trees."""

    def __init__(self):
        self.modules: dict[int, int] = {}  # id(module) -> its number in the file
        self.tensors: dict[int, str] = {}  # id(tensor) -> its array entry
        self.keep: list = []  # the objects the ids belong to, alive until the end
        self.open: dict[int, tuple] = {}  # id(module) -> its path, while its node is built
        self.depth = 0  # > 0 inside a module tree


def encode_module(enc, m, path):
    """``m`` as a ``$module`` node (or a reference); ``enc`` is the _Encoder."""
    state = enc.modules_state
    if id(m) in state.open:
        raise SerializationError(
            f"save: the {type(m).__name__} at {where(path)} is its own ancestor (at "
            f"{where(state.open[id(m)])}): checkpoints hold module trees, shared branches "
            "included, but not cycles; hold the outer module some other way")
    if id(m) in state.modules:
        return {"$module_ref": state.modules[id(m)]}
    cls = type(m)
    d = m.__dict__
    if not set(d) >= _SAVED_INTERNAL:
        raise SerializationError(f"save: the {cls.__name__} at {where(path)} has no parameter "
                                 "registry: its __init__ must call super().__init__() first")
    state.modules[id(m)] = len(state.modules)
    state.keep.append(m)
    state.open[id(m)] = path
    state.depth += 1
    try:
        node = {"$module": _global_name(cls, path), "training": bool(d["training"])}
        for field, reg in zip(FIELDS[:3], ("_parameters", "_buffers", "_modules")):
            node[field] = [[k, None if v is None else enc.encode(v, (*path, k))]
                           for k, v in d[reg].items()]
        node["non_persistent"] = sorted(d["_non_persistent"])
        node["attributes"] = [[k, enc.encode(v, (*path, k))] for k, v in d.items()
                              if k not in _INTERNAL]
    finally:
        state.depth -= 1
        del state.open[id(m)]
    return node


def encode_tensor(enc, t, path):
    """Inside a module tree: a Parameter as ``$parameter``, a repeat as a reference."""
    state = enc.modules_state
    if not state.depth:
        return None
    if id(t) in state.tensors:
        return {"$tensor_ref": state.tensors[id(t)]}
    name = enc.store(t, path)
    state.tensors[id(t)] = name
    state.keep.append(t)
    if isinstance(t, Parameter):
        return {"$parameter": name, "requires_grad": bool(t.requires_grad)}
    return {"$tensor": name, "requires_grad": bool(t.requires_grad)}


def encode_other(obj, path):
    """A dtype, device, function or class as its node; None if ``obj`` is none."""
    if isinstance(obj, np.dtype):
        return {"$dtype": _dtype_name(obj, path)}
    if isinstance(obj, type) and issubclass(obj, np.generic):  # np.float32 itself
        return {"$dtype": _dtype_name(np.dtype(obj), path), "type": True}
    if isinstance(obj, Device):
        if not _DEVICE.fullmatch(str(obj)):
            raise SerializationError(f"save: device {obj} at {where(path)} is neither 'cpu' "
                                     "nor 'cuda:N', which is all checkpoints store")
        return {"$device": str(obj)}
    if isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType,
                        types.MethodType)):
        return {"$global": _global_name(obj, path)}
    return None


def _dtype_name(dt, path):
    if dt.name not in _DTYPES:
        raise SerializationError(f"save: dtype {dt} at {where(path)} is not a number or bool "
                                 "dtype, which is all checkpoints store")
    return dt.name


def _global_name(obj, path):
    qual = getattr(obj, "__qualname__", "")
    bound = isinstance(obj, types.MethodType) or (
        isinstance(obj, types.BuiltinFunctionType) and obj.__self__ is not None
        and not isinstance(obj.__self__, types.ModuleType))
    if bound or not isinstance(getattr(obj, "__module__", None), str) or "<" in qual:
        what = "a bound method" if bound else "a lambda" if "<lambda>" in qual else \
            "a class or function defined inside a function"
        raise SerializationError(
            f"save: cannot store {qual or repr(obj)} at {where(path)}: it is {what}, which has "
            "no name to store, and checkpoints never pickle code. Use a module-level "
            "function or class (load looks it up by name in its allow-list), an nn.Module, "
            "or keep it out of the module and save model.state_dict() instead")
    return _name(obj)


# ------------------------------------------------------------------ load
def check_node(r, node, path) -> bool:
    """Validate a module-tree node for the _Reader ``r``; False if ``node`` is
    none of the kinds this module adds."""
    keys = sorted(node)
    if keys == _MODULE_KEYS:
        _check_module(r, node, path)
    elif keys == ["$module_ref"]:
        n = node["$module_ref"]
        if type(n) is not int or not 0 <= n < len(r.module_classes) or n in r.open_modules:
            raise r.bad(f"its metadata refers to module {n!r} at {where(path)}, which is not "
                        "a complete module before it")
    elif keys == ["$parameter", "requires_grad"] and type(node["requires_grad"]) is bool:
        r.ref(node["$parameter"], "parameter", where(path), node["requires_grad"])
    elif keys == ["$tensor_ref"]:
        if r.kinds.get(node["$tensor_ref"]) not in ("tensor", "parameter"):
            raise r.bad(f"its metadata refers to tensor {node['$tensor_ref']!r} at "
                        f"{where(path)}, which comes nowhere before it")
    elif keys == ["$global"] and isinstance(node["$global"], str):
        _allowed(r, node["$global"], path, module=False)
    else:
        dtype = keys in (["$dtype"], ["$dtype", "type"]) and isinstance(node["$dtype"], str) \
            and node["$dtype"] in _DTYPES and node.get("type", True) is True
        device = keys == ["$device"] and isinstance(node["$device"], str) \
            and _DEVICE.fullmatch(node["$device"]) is not None
        return dtype or device
    return True


def _check_module(r, node, path):
    name = node["$module"]
    if not isinstance(name, str) or type(node["training"]) is not bool:
        raise r.bad(f"its metadata has a malformed module at {where(path)}")
    r.module_classes.append(_allowed(r, name, path, module=True))
    number = len(r.module_classes) - 1
    r.open_modules.add(number)
    seen = set()
    names = {}
    for field in FIELDS:
        items = node[field]
        if not isinstance(items, list):
            raise r.bad(f"its metadata has a malformed module at {where(path)} ({field})")
        names[field] = []
        for item in items:
            if not (isinstance(item, list) and len(item) == 2 and isinstance(item[0], str)):
                raise r.bad(f"its metadata has a malformed {field} item at {where(path)}")
            key, value = item
            if key in seen or key in _INTERNAL or (field != "attributes"
                                                   and (not key or "." in key)):
                raise r.bad(f"its metadata has an invalid or repeated name {key!r} in the "
                            f"{field} of the module at {where(path)}")
            seen.add(key)
            names[field].append(key)
            r.count_item(path)
            if value is None and field != "attributes":
                continue
            kind = next((k for k in value if k.startswith("$")), None) \
                if isinstance(value, dict) else None
            if field != "attributes" and kind not in _SLOTS[field]:
                raise r.bad(f"its metadata has {json.dumps(value)[:60]} where the {field} of the "
                            f"module at {where(path)} can only hold {'/'.join(_SLOTS[field])}")
            r.check_tree(value, (*path, key))
            if field == "parameters" and kind == "$tensor_ref" \
                    and r.kinds[value["$tensor_ref"]] != "parameter":
                raise r.bad(f"its metadata has a plain tensor as parameter {key!r} of the "
                            f"module at {where(path)}")
    r.open_modules.discard(number)
    persistent = node["non_persistent"]
    if not isinstance(persistent, list) or len(set(map(str, persistent))) != len(persistent) \
            or not all(isinstance(k, str) and k in names["buffers"] for k in persistent):
        raise r.bad(f"its metadata has a malformed non_persistent list at {where(path)} "
                    "(names of the module's buffers, each once)")


def _allowed(r, name, path, module):
    obj = _resolve(name, r.weights_only)
    if obj is not None and (not module or (isinstance(obj, type) and issubclass(obj, Module))):
        r.globals[name] = obj
        return obj
    here = f"at {where(path)}"
    short = name.rpartition(".")[2]
    if r.weights_only:
        what = f"a whole module (class {name!r}, {here})" if module else \
            f"a reference to {name!r} ({here})"
        raise r.refuse(
            f"holds {what}, and weights_only=True (the default, as in PyTorch 2.6+) loads "
            "only tensors and plain data. If you trust the file, pass weights_only=False "
            "(module classes then come from tapegrad.nn, add_safe_globals and the modules "
            "already loaded, nothing is imported); or save model.state_dict() and load "
            "that into a model you build; or register every class it names with "
            "tapegrad.serialization.add_safe_globals([...])")
    if obj is not None:
        raise r.bad(f"{name!r} {here} is not an nn.Module class, so no module can be built "
                    "from it")
    raise r.refuse(
        f"names {'class ' if module else ''}{name!r} ({here}), which is not in the "
        "allow-list (tapegrad.nn's classes, tapegrad.ops' functions, and what "
        "add_safe_globals registered); nothing is imported by name from a file. If you "
        f"trust the file, register it: tapegrad.serialization.add_safe_globals([{short}]) "
        f"(or add_safe_globals([({short}, {name!r})]) where it now lives elsewhere), or "
        f"load inside `with tapegrad.serialization.safe_globals([{short}]):`")


def decode_node(dec, kind, node):
    """Build a module-tree node for the _Decoder ``dec`` (already validated)."""
    if kind == "$module":
        return _decode_module(dec, node)
    if kind == "$module_ref":
        return dec.modules[node["$module_ref"]]
    if kind == "$parameter":
        p = Parameter(dec.tensor(node["$parameter"]), requires_grad=node["requires_grad"])
        dec.tensors[node["$parameter"]] = p
        return p
    if kind == "$tensor_ref":
        return dec.tensors[node["$tensor_ref"]]
    if kind == "$global":
        return dec.globals[node["$global"]]
    if kind == "$dtype":
        dt = np.dtype(node["$dtype"])
        return dt.type if "type" in node else dt
    if dec.remap:  # $device: map_location moves device attributes with the tensors
        return dec.device
    try:
        return get_device(node["$device"])
    except DeviceError as exc:
        raise dec.refuse(f"has a module attribute that is device {node['$device']!r}, which "
                         f"this machine cannot make ({exc}); pass map_location='cpu' (or "
                         "another device) to load it there") from exc


def _decode_module(dec, node):
    cls = dec.globals[node["$module"]]
    try:
        m = cls.__new__(cls)
    except Exception as exc:  # noqa: BLE001 - a registered class's own __new__
        raise dec.bad(f"{node['$module']}.__new__({cls.__name__}) failed: {exc}") from exc
    Module.__init__(m)  # fresh registries and hook tables; the class's __init__ never runs
    dec.modules.append(m)
    d = m.__dict__
    d["training"] = node["training"]
    for field, reg in zip(FIELDS[:3], ("_parameters", "_buffers", "_modules")):
        d[reg].update((k, None if v is None else dec.decode(v)) for k, v in node[field])
    d["_non_persistent"].update(node["non_persistent"])
    for k, v in node["attributes"]:
        d[k] = dec.decode(v)
    return m

