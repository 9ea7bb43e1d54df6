"""Collation, as ``torch.utils.data``'s: samples -> one batch of their structure.

:func:`default_collate` stacks arrays and Tensors along a new first axis, turns
Python ints into int64 (bools into bool), floats into float64 and NumPy scalars
into arrays of their dtype, keeps strings as a list, and recurses into dicts,
namedtuples, tuples and lists. :func:`default_convert` (for ``batch_size=None``)
only turns arrays into Tensors. One difference from PyTorch: tuple samples give
a tuple, not a list (tapegrad's batches always were tuples; unpacking is the same).
"""

from __future__ import annotations

import collections.abc
import copy

import numpy as np

from ..device import cpu, device_of_array
from ..errors import ArgumentError, ArgumentTypeError, ShapeError
from ..tensor import Tensor, _wrap, get_default_dtype

__all__ = ["collate", "default_collate", "default_convert"]

_UNSUPPORTED = ("default_collate: a batch must hold Tensors, NumPy arrays, numbers, strings, "
                "dicts, tuples or lists; found {}")


def _is_array(x) -> bool:
    """A raw NumPy array or a device (CuPy) array."""
    return isinstance(x, np.ndarray) or (not isinstance(x, (str, bytes, Tensor))
                                         and device_of_array(x) is not cpu)


def _is_text(dtype) -> bool:
    return dtype.kind in "USO"  # strings, bytes, Python objects: not stackable numbers


def collate(samples):
    """A list of samples -> one batch of their structure, with raw arrays (NumPy, or
    the samples' device) at the leaves: what :func:`default_collate` wraps as Tensors.

    >>> collate([(np.zeros(2), 1), (np.ones(2), 2)])   # (array (2, 2), array([1, 2]))
    """
    samples = list(samples)
    if not samples:
        raise ArgumentError("collate: empty batch; a batch needs at least one sample")
    return _collate(samples)


def _collate(batch):
    elem = batch[0]
    if isinstance(elem, Tensor) or _is_array(elem):
        return _stack(batch)
    if isinstance(elem, np.generic) and not isinstance(elem, (np.str_, np.bytes_)):
        if _is_text(elem.dtype):
            raise ArgumentTypeError(_UNSUPPORTED.format(type(elem).__name__))
        return np.asarray(batch)  # NumPy scalars keep their dtype
    if isinstance(elem, float):
        return np.asarray(batch, dtype=np.float64)
    if isinstance(elem, int):  # bool too: bools give a bool array, as PyTorch's
        return _ints(batch)
    if isinstance(elem, (str, bytes)):
        return list(batch)
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(elem, {k: _collate([d[k] for d in batch]) for k in elem})
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        for k, s in enumerate(batch):
            if len(s) != size:
                raise ShapeError(f"default_collate: every sample of a batch needs as many "
                                 f"fields; sample 0 has {size}, sample {k} has {len(s)}")
        return _rebuild_sequence(elem, [_collate(list(f)) for f in zip(*batch)])
    raise ArgumentTypeError(_UNSUPPORTED.format(type(elem).__name__))


def _ints(batch):
    """PyTorch's ``torch.tensor(ints)``: int64, bool for bools; a float among the
    ints makes the default float dtype."""
    arr = np.asarray(batch)
    if arr.dtype.kind in "iu":
        return arr.astype(np.int64, copy=False)
    if arr.dtype.kind == "f":
        return arr.astype(get_default_dtype())
    if arr.dtype.kind != "b":
        raise ArgumentTypeError(f"default_collate: numbers that do not fit int64 or mix with "
                                f"other types ({arr.dtype}): {batch[:4]!r}")
    return arr


def _stack(items):
    items = [i.array if isinstance(i, Tensor) else i for i in items]
    first = items[0]
    if isinstance(first, np.ndarray) and _is_text(first.dtype):
        raise ArgumentTypeError(_UNSUPPORTED.format(f"a NumPy array of {first.dtype}"))
    shape = np.shape(first)
    for k, a in enumerate(items):
        if np.shape(a) != shape:
            raise ShapeError(f"default_collate: arrays of one batch must have one shape to be "
                             f"stacked; sample 0 has {tuple(shape)}, sample {k} has "
                             f"{tuple(np.shape(a))}")
    dev = device_of_array(first)
    if dev is not cpu:  # device samples stack on their device
        return dev.xp.stack([dev.put(i) for i in items])
    return np.stack([np.asarray(i) for i in items])


def _rebuild_mapping(elem, values):
    """A mapping of ``elem``'s type (PyTorch's rule: copy a mutable one, else call
    its type; a plain dict when neither works)."""
    try:
        if isinstance(elem, collections.abc.MutableMapping):
            clone = copy.copy(elem)
            clone.update(values)
            return clone
        return type(elem)(values)
    except TypeError:
        return dict(values)


def _rebuild_sequence(elem, values):
    """A sequence of ``elem``'s kind: a namedtuple of its type, a tuple, a list (or
    another mutable sequence, copied), else a list."""
    if isinstance(elem, tuple):
        return type(elem)(*values) if hasattr(elem, "_fields") else tuple(values)
    try:
        if isinstance(elem, collections.abc.MutableSequence):
            clone = copy.copy(elem)
            for k, v in enumerate(values):
                clone[k] = v
            return clone
        return type(elem)(values)
    except TypeError:
        return list(values)


def to_tensors(tree, device=None, arrays: bool = True):
    """``tree`` with each Tensor moved to ``device`` and, with ``arrays``, each raw
    numeric array (and NumPy scalar) wrapped as a Tensor without a copy; strings,
    numbers and other leaves unchanged. ``device=None`` keeps arrays where they are."""
    if isinstance(tree, Tensor):
        return tree if device is None or tree.device is device else tree.to(device)
    if _is_array(tree) or (isinstance(tree, np.generic) and not isinstance(tree, (str, bytes))):
        if not arrays or _is_text(tree.dtype):
            return tree
        return _tensor(np.asarray(tree) if isinstance(tree, np.generic) else tree, device)
    if isinstance(tree, (str, bytes)):
        return tree
    if isinstance(tree, collections.abc.Mapping):
        return _rebuild_mapping(tree, {k: to_tensors(v, device, arrays) for k, v in tree.items()})
    if isinstance(tree, collections.abc.Sequence):
        return _rebuild_sequence(tree, [to_tensors(v, device, arrays) for v in tree])
    return tree


def _tensor(a, device) -> Tensor:
    src = device_of_array(a)
    dev = src if device is None else device
    if dev is src:
        return _wrap(a, dev, None, 0, False)  # no copy, as torch.as_tensor
    return Tensor(a, device=dev)


def default_collate(batch):
    """A list of samples -> one batch of Tensors of the samples' structure, as
    ``torch.utils.data.default_collate`` (see the module docstring for the rules).

    >>> x, y = default_collate([(np.zeros(2, np.float32), 1), (np.ones(2, np.float32), 2)])
    >>> x.shape, y.tolist()     # x float32
    ((2, 2), [1, 2])
    """
    return to_tensors(collate(batch))


def default_convert(data):
    """One sample with its NumPy arrays (numeric ones) as Tensors, nothing stacked:
    the DataLoader's conversion for ``batch_size=None``, as PyTorch's."""
    return to_tensors(data)
