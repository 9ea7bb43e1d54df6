"""Datasets: anything with ``len()`` and ``[i]``; arrays held whole in memory.

A dataset may also define ``get_batch(indices)`` (an integer index array ->
one tuple of stacked arrays). :class:`~tapegrad.data.DataLoader` uses it when
present, so in-memory datasets are batched by one fancy-indexing operation per
field instead of a Python loop over samples.
"""

from __future__ import annotations

import numpy as np

from ..device import cpu, device_of_array
from ..errors import ArgumentError, ShapeError
from ..tensor import Tensor

__all__ = ["Dataset", "TensorDataset", "Subset"]


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


def _as_array(a):
    """Raw array of a Tensor (host or device), or ``numpy.asarray`` of anything else."""
    if isinstance(a, Tensor):
        return a.data
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

    >>> Subset(ds, range(100))   # the first 100 samples
    """

    def __init__(self, dataset, indices):
        self.dataset = dataset
        idx = np.asarray(indices)
        if idx.dtype == bool:
            idx = np.flatnonzero(idx)
        idx = idx.astype(np.int64, copy=False)
        n = len(dataset)
        if idx.size and (idx.min() < -n or idx.max() >= n):
            raise ArgumentError(f"Subset: indices must lie in [-{n}, {n}) for a dataset of "
                                f"{n} samples, got range [{idx.min()}, {idx.max()}]")
        self.indices = idx

    def __len__(self) -> int:
        return int(self.indices.size)

    def __getitem__(self, index):
        return self.dataset[int(self.indices[index])]

    def get_batch(self, indices):
        inner = self.indices[np.asarray(indices)]
        if hasattr(self.dataset, "get_batch"):
            return self.dataset.get_batch(inner)
        from .loader import collate

        return collate([self.dataset[int(i)] for i in inner])
