"""Datasets, as ``torch.utils.data``'s: map-style (``len()`` and ``[i]``) and
iterable (:class:`IterableDataset`), and their combinations (:class:`Subset`,
:class:`ConcatDataset`, :class:`ChainDataset`, :class:`StackDataset`,
:func:`random_split`).

A map-style dataset may also define ``get_batch(indices)`` (an integer index
array -> one tuple, dict or array of stacked arrays).
:class:`~tapegrad.data.DataLoader` uses it when present, so in-memory datasets
are batched by one fancy-indexing operation per field instead of a Python loop
over samples. ``__getitems__(indices)`` (a list of samples), PyTorch's batched
read, is used too.
"""

from __future__ import annotations

import bisect
import math
import numbers
import operator
import warnings

import numpy as np

from ..device import cpu, device_of_array, to_host
from ..errors import ArgumentError, ArgumentTypeError, OutOfRangeError, ShapeError
from ..tensor import Tensor
from .collate import collate
from .sampler import _generator

__all__ = ["Dataset", "IterableDataset", "TensorDataset", "Subset", "ConcatDataset",
           "ChainDataset", "StackDataset", "random_split"]


class Dataset:
    """Base class: override ``__len__`` and ``__getitem__(i)`` (one sample, a
    tuple of arrays or numbers). Optionally ``get_batch(indices)``.

    >>> class Squares(Dataset):
    ...     def __len__(self): return 10
    ...     def __getitem__(self, i): return float(i), float(i * i)
    """

    def __len__(self) -> int:
        raise NotImplementedError

    def __getitem__(self, index):
        raise NotImplementedError

    def __add__(self, other):
        """``a + b`` is ``ConcatDataset([a, b])``."""
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """Base class of a stream of samples: override ``__iter__``; ``__len__`` is
    optional (``len(loader)`` needs it). A DataLoader iterates it once per epoch,
    batching ``batch_size`` consecutive samples; it takes no sampler or shuffle.

    >>> class Count(IterableDataset):
    ...     def __iter__(self): return iter(range(10))
    """

    def __iter__(self):
        raise NotImplementedError

    def __len__(self) -> int:
        # a TypeError, as len() of an object without __len__ (list() relies on it)
        raise ArgumentTypeError(f"{type(self).__name__} (an IterableDataset) has no length; "
                                "define __len__ to use len() or len(loader)")

    def __add__(self, other):
        """``a + b`` is ``ChainDataset([a, b])``."""
        return ChainDataset([self, other])


def _as_array(a):
    """Raw array of a Tensor (host or device), or ``numpy.asarray`` of anything else."""
    if isinstance(a, Tensor):
        return a.array
    if hasattr(a, "__cuda_array_interface__"):  # a CuPy array: keep it on its device
        return a
    return np.asarray(a)


class TensorDataset(Dataset):
    """Samples are rows of equally long arrays: ``TensorDataset(images, labels)``.

    Takes Tensors or anything ``numpy.asarray`` accepts; the arrays are held as
    they are (no copy). ``ds[i]`` is a tuple of arrays (one row of each);
    ``ds.get_batch(idx)`` a tuple of stacked rows; ``ds.tensors`` the arrays.

    >>> ds = TensorDataset(images, labels); ds[0]   # (image 0, label 0)
    """

    def __init__(self, *tensors):
        if not tensors:
            raise ArgumentError("TensorDataset: give at least one array, e.g. "
                                "TensorDataset(images, labels)")
        arrays = tuple(_as_array(t) for t in tensors)
        for a in arrays:
            if a.ndim == 0:
                raise ShapeError("TensorDataset: arrays need a leading sample axis, got a "
                                 "0-d array")
        n = arrays[0].shape[0]
        if any(a.shape[0] != n for a in arrays):
            shapes = ", ".join(str(tuple(a.shape)) for a in arrays)
            raise ShapeError(f"TensorDataset: all arrays need the same number of samples "
                             f"(first axis), got shapes {shapes}")
        self.tensors = arrays

    def __len__(self) -> int:
        return int(self.tensors[0].shape[0])

    def __getitem__(self, index):
        return tuple(a[index] for a in self.tensors)

    def get_batch(self, indices):
        """One fancy-indexing copy per array: ``indices`` is an integer array."""
        out = []
        for a in self.tensors:
            dev = device_of_array(a)
            out.append(a[indices] if dev is cpu else a[dev.put(indices)])  # device indices
        return tuple(out)

    def __repr__(self) -> str:
        parts = ", ".join(f"{tuple(a.shape)} {a.dtype}" for a in self.tensors)
        return f"TensorDataset({parts})"


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices`` (batched as fast as the parent).

    ``indices`` is kept as given, as in PyTorch (``random_split`` gives lists); a
    boolean mask is taken as the positions where it is True. ``sub[i]`` is
    ``dataset[indices[i]]``; a list or slice ``i`` reads ``dataset[[...]]``.

    >>> Subset(ds, range(100))   # the first 100 samples
    """

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    @property
    def indices(self):
        return self._indices

    @indices.setter
    def indices(self, indices):
        idx = to_host(_as_array(indices))
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
            indices = idx
        elif idx.size and idx.dtype.kind not in "iu":
            raise ArgumentTypeError(f"Subset: indices must be integers (or a boolean mask), got "
                                    f"{idx.dtype} values")
        if idx.ndim != 1:
            raise ShapeError(f"Subset: indices must be one-dimensional, got shape {idx.shape}")
        idx = idx.astype(np.int64, copy=False)
        n = len(self.dataset)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise ArgumentError(f"Subset: indices must lie in [-{n}, {n}) for a dataset of "
                                f"{n} samples, got range [{idx.min()}, {idx.max()}]")
        self._indices, self._idx = indices, idx

    def __len__(self) -> int:
        return int(self._idx.size)

    def __getitem__(self, index):
        inner = self._idx[index]
        if np.ndim(inner) == 0:
            return self.dataset[int(inner)]
        return self.dataset[inner.tolist()]

    def __getitems__(self, indices):
        """PyTorch's batched read: a list of samples (the parent's ``__getitems__`` if any)."""
        if type(self).__getitem__ is not Subset.__getitem__:  # a subclass changes samples
            return [self[i] for i in indices]
        inner = self._idx[np.asarray(indices, dtype=np.int64)].tolist()
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__(inner)
        return [self.dataset[i] for i in inner]

    def get_batch(self, indices):
        inner = self._idx[np.asarray(indices, dtype=np.int64)]
        reader = batch_reader(self.dataset)
        if reader is not None:
            return reader(inner)
        return collate([self.dataset[int(i)] for i in inner])


class ConcatDataset(Dataset):
    """Map-style datasets one after another (also ``a + b``), as PyTorch's:
    ``cumulative_sizes[k]`` is where part ``k`` ends.

    >>> both = ConcatDataset([train, extra]); len(both) == len(train) + len(extra)
    """

    @staticmethod
    def cumsum(sequence):
        out, total = [], 0
        for d in sequence:
            total += len(d)
            out.append(total)
        return out

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ArgumentError("ConcatDataset: datasets is empty; give a list of at least one "
                                "dataset")
        for k, d in enumerate(self.datasets):
            if isinstance(d, IterableDataset):
                raise ArgumentTypeError(f"ConcatDataset: datasets[{k}] is an IterableDataset "
                                        f"({type(d).__name__}), which has no [i]; chain streams "
                                        "with ChainDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        n = len(self)
        try:
            i = operator.index(idx)
        except TypeError:
            raise ArgumentTypeError(f"ConcatDataset: an index must be an integer, got "
                                    f"{type(idx).__name__}") from None
        if not -n <= i < n:  # an IndexError, so `for sample in dataset` stops
            raise OutOfRangeError(f"ConcatDataset: index {i} is out of range for {n} samples")
        i = i + n if i < 0 else i
        part = bisect.bisect_right(self.cumulative_sizes, i)
        return self.datasets[part][i - (self.cumulative_sizes[part - 1] if part else 0)]

    def get_batch(self, indices):
        """One ``get_batch`` per part that holds some of ``indices``, put back in order."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        n = len(self)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise OutOfRangeError(f"ConcatDataset: indices must lie in [-{n}, {n}), got range "
                                  f"[{idx.min()}, {idx.max()}]")
        idx = np.where(idx < 0, idx + n, idx)
        readers = [batch_reader(d) for d in self.datasets]
        if not all(readers):
            return collate([self[int(i)] for i in idx])
        ends = np.asarray(self.cumulative_sizes)
        starts = ends - np.asarray([len(d) for d in self.datasets])
        part = np.searchsorted(ends, idx, side="right")
        used = np.unique(part)
        if used.size <= 1:  # also an empty batch
            p = int(used[0]) if used.size else 0
            return readers[p](idx - starts[p])
        pieces = [readers[p](idx[part == p] - starts[p]) for p in used]
        # the pieces hold the samples sorted by part; `inverse` puts them back
        order = np.argsort(part, kind="stable")
        inverse = np.empty_like(order)
        inverse[order] = np.arange(order.size)
        return _join(pieces, inverse)


def _join(pieces, inverse):
    """Concatenate per-part batches of one structure, then reorder by ``inverse``."""
    first = pieces[0]
    if isinstance(first, dict):
        return {k: _join([p[k] for p in pieces], inverse) for k in first}
    if isinstance(first, tuple):
        return tuple(_join([p[f] for p in pieces], inverse) for f in range(len(first)))
    arrays = [p.array if isinstance(p, Tensor) else p for p in pieces]
    dev = device_of_array(arrays[0])
    joined = dev.xp.concatenate([dev.put(a) for a in arrays])
    return joined[inverse if dev is cpu else dev.put(inverse)]


class ChainDataset(IterableDataset):
    """IterableDatasets one after another, read lazily (also ``a + b``)."""

    def __init__(self, datasets):
        self.datasets = datasets

    def _parts(self):
        for k, d in enumerate(self.datasets):
            if not isinstance(d, IterableDataset):
                raise ArgumentTypeError(f"ChainDataset: part {k} ({type(d).__name__}) is not an "
                                        "IterableDataset; join map-style datasets with "
                                        "ConcatDataset")
            yield d

    def __iter__(self):
        for d in self._parts():
            yield from d

    def __len__(self) -> int:
        return sum(len(d) for d in self._parts())


class StackDataset(Dataset):
    """Equally long datasets side by side: ``StackDataset(a, b)[i]`` is
    ``(a[i], b[i])``, ``StackDataset(x=a, y=b)[i]`` is ``{"x": a[i], "y": b[i]}``."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ArgumentError("StackDataset: give the datasets positionally (tuple samples) "
                                "or by name (dict samples), not both")
        if not args and not kwargs:
            raise ArgumentError("StackDataset: give at least one dataset")
        parts = args or tuple(kwargs.values())
        lengths = [len(d) for d in parts]
        if len(set(lengths)) > 1:
            raise ArgumentError(f"StackDataset: the datasets must be equally long, got lengths "
                                f"{lengths}")
        self.datasets = args if args else kwargs
        self._length = lengths[0]

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)


def batch_reader(dataset):
    """``dataset.get_batch`` where it batches by indexing, else None: a Subset or
    ConcatDataset does only when its parents do (and its ``[i]`` is not overridden)."""
    for base in (Subset, ConcatDataset):
        if isinstance(dataset, base):
            kind = type(dataset)
            if kind.__getitem__ is not base.__getitem__ and kind.get_batch is base.get_batch:
                return None  # a subclass that changes samples: read them one by one
            parents = [dataset.dataset] if base is Subset else dataset.datasets
            return dataset.get_batch if all(batch_reader(d) for d in parents) else None
    return getattr(dataset, "get_batch", None)


def random_split(dataset, lengths, generator=None):
    """Split ``dataset`` into non-overlapping random :class:`Subset` s, as PyTorch's.

    ``lengths`` are sample counts that sum to ``len(dataset)``, or fractions that
    sum to 1: each split gets ``floor(fraction * len(dataset))`` and the remainder is
    handed out one sample at a time, round-robin from the first split (a warning
    names an empty split). The permutation is drawn from ``generator`` (a
    ``numpy.random.Generator``) or else tapegrad's global generator, so
    ``tapegrad.manual_seed`` makes it repeatable; it is not PyTorch's ``randperm``
    stream, the split sizes are PyTorch's.

    >>> train, val = random_split(ds, [0.8, 0.2], generator=numpy.random.default_rng(0))
    """
    gen = _generator(generator, "random_split")
    try:
        lengths = list(lengths)
    except TypeError:
        raise ArgumentTypeError(f"random_split: lengths must be a sequence of sample counts or "
                                f"fractions, got {type(lengths).__name__}") from None
    for k, v in enumerate(lengths):
        if isinstance(v, bool) or not isinstance(v, numbers.Real):
            raise ArgumentTypeError(f"random_split: lengths[{k}] must be a number, got "
                                    f"{type(v).__name__}")
    n = len(dataset)
    total = sum(lengths)
    if math.isclose(total, 1) and total <= 1:  # fractions (PyTorch's test, [1] included)
        sizes = []
        for k, frac in enumerate(lengths):
            if not 0 <= frac <= 1:
                raise ArgumentError(f"random_split: fraction lengths[{k}] = {frac} is not "
                                    "between 0 and 1")
            sizes.append(math.floor(n * frac))
        for k in range(n - sum(sizes)):
            sizes[k % len(sizes)] += 1
        for k, size in enumerate(sizes):
            if size == 0:
                warnings.warn(f"random_split: split {k} has length 0 (an empty dataset)",
                              stacklevel=2)
        lengths = sizes
    for k, v in enumerate(lengths):
        if not isinstance(v, numbers.Integral) or v < 0:
            raise ArgumentError(f"random_split: lengths[{k}] = {v!r} must be a sample count "
                                "(an int >= 0), or all lengths fractions that sum to 1")
    if sum(lengths) != n:
        raise ArgumentError(f"random_split: the lengths {lengths} sum to {sum(lengths)}, not "
                            f"to the dataset's length {n}")
    perm = gen.permutation(n).tolist()
    splits, start = [], 0
    for size in lengths:
        splits.append(Subset(dataset, perm[start:start + int(size)]))
        start += int(size)
    return splits
