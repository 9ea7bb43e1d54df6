"""Datasets and batching, as ``torch.utils.data`` (also ``tapegrad.utils.data``):
datasets (``Dataset``, ``IterableDataset``, ``TensorDataset``, ``Subset``,
``ConcatDataset``, ``ChainDataset``, ``StackDataset``, ``random_split``), samplers,
``DataLoader`` and ``default_collate``, and the bundled/local datasets in
:mod:`tapegrad.data.datasets`.

>>> from tapegrad.data import DataLoader, datasets
>>> train, test = datasets.digits()           # needs scikit-learn (tapegrad[train])
>>> for x, y in DataLoader(train, batch_size=64, shuffle=True, seed=0):
...     ...                                    # x: (64, 1, 8, 8) float32, y: (64,) int64

Random draws (shuffles, splits, samplers) come from ``generator=`` (a
``numpy.random.Generator``) or tapegrad's global generator (``tapegrad.manual_seed``):
repeatable, but not PyTorch's random stream.
"""

from . import dataloader as dataloader  # torch.utils.data.dataloader's names
from . import datasets
from .collate import default_collate, default_convert
from .dataset import (
    ChainDataset,
    ConcatDataset,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from .datasets import DatasetError, DatasetNotFoundError
from .loader import DataLoader, get_worker_info
from .sampler import (
    BatchSampler,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

__all__ = ["Dataset", "TensorDataset", "Subset", "DataLoader", "datasets", "DatasetError",
           "DatasetNotFoundError", "Sampler", "SequentialSampler", "DistributedSampler",
           "IterableDataset", "ConcatDataset", "ChainDataset", "StackDataset", "random_split",
           "RandomSampler", "SubsetRandomSampler", "WeightedRandomSampler", "BatchSampler",
           "default_collate", "default_convert", "get_worker_info"]
