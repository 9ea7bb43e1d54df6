"""Datasets and batching: ``Dataset``, ``TensorDataset``, ``DataLoader``, and
the bundled/local datasets in :mod:`tapegrad.data.datasets`.

>>> from tapegrad.data import DataLoader, datasets
>>> train, test = datasets.digits()           # needs scikit-learn (tapegrad[train])
>>> for x, y in DataLoader(train, batch_size=64, shuffle=True, seed=0):
...     ...                                    # x: (64, 1, 8, 8) float32, y: (64,) int64
"""

from . import datasets
from .dataset import Dataset, Subset, TensorDataset
from .datasets import DatasetError, DatasetNotFoundError
from .loader import DataLoader
from .sampler import DistributedSampler, Sampler, SequentialSampler

__all__ = ["Dataset", "TensorDataset", "Subset", "DataLoader", "datasets", "DatasetError",
           "DatasetNotFoundError", "Sampler", "SequentialSampler", "DistributedSampler"]
