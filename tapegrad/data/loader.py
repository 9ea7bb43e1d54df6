"""DataLoader: shuffled mini-batches of a dataset, as tuples of Tensors."""

from __future__ import annotations

import numpy as np

from ..device import cpu, device_of_array, get_device
from ..errors import ArgumentError
from ..random import get_generator
from ..tensor import Tensor, _wrap

__all__ = ["DataLoader", "collate"]


def collate(samples):
    """A list of samples -> one batch of the samples' structure, as PyTorch's
    default collate: tuples (and lists) of fields -> a tuple of stacked fields,
    a dict -> a dict of stacked fields, an array or number -> a stacked array."""
    if not samples:
        raise ArgumentError("collate: empty batch")
    first = samples[0]
    if isinstance(first, dict):
        return {k: _stack([s[k] for s in samples]) for k in first}
    if isinstance(first, (tuple, list)):
        return tuple(_stack([s[k] for s in samples]) for k in range(len(first)))
    return _stack(samples)


def _stack(items):
    items = [i.data if isinstance(i, Tensor) else i for i in items]
    dev = device_of_array(items[0])
    if dev is not cpu:  # device samples stack on their device
        return dev.xp.stack([dev.put(i) for i in items])
    return np.stack([np.asarray(i) for i in items])


class DataLoader:
    """Iterate over ``dataset`` in mini-batches of the samples' structure: a tuple
    of Tensors for tuple samples (``TensorDataset``), a dict for dict samples, one
    Tensor for samples of one array.

    >>> loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, seed=0)
    >>> for xb, yb in loader: ...

    - ``shuffle``: a new permutation every epoch (every ``iter()``). With
      ``seed`` given, epoch *e*'s permutation depends only on ``(seed, e)``,
      so runs are reproducible and :meth:`set_epoch` can resume mid-sequence;
      with ``seed=None`` it is drawn from tapegrad's global CPU generator, so
      ``tapegrad.manual_seed`` makes it repeatable.
    - ``drop_last``: skip a last batch smaller than ``batch_size``.
    - ``device``: where the batches' Tensors live (``"cpu"``, ``"cuda"``...).
    - ``sampler``: the indices to visit, in order (e.g. a
      :class:`~tapegrad.data.DistributedSampler`); excludes ``shuffle``.
      :meth:`set_epoch` is passed on to it.

    Datasets with ``get_batch(indices)`` (``TensorDataset``, ``Subset``) are
    batched by fancy indexing, one copy per field; other datasets are read
    sample by sample and stacked (:func:`collate`).
    """

    def __init__(self, dataset, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False, seed: int | None = None, device="cpu", *,
                 sampler=None, num_workers: int = 0, pin_memory: bool = False,
                 persistent_workers: bool = False):
        # PyTorch's worker/pinning options change only how fast batches arrive, never
        # which: batches are built in this process, vectorised, so they are accepted
        # (a PyTorch script runs unchanged) and have no effect
        if isinstance(num_workers, bool) or not isinstance(num_workers, (int, np.integer)) \
                or num_workers < 0:
            raise ArgumentError(f"DataLoader: num_workers must be an int >= 0, got "
                                f"{num_workers!r}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) \
                or batch_size < 1:
            raise ArgumentError(f"DataLoader: batch_size must be a positive int, got "
                                f"{batch_size!r}")
        if sampler is not None and shuffle:
            raise ArgumentError("DataLoader: sampler and shuffle=True exclude each other; "
                                "let the sampler shuffle (DistributedSampler(shuffle=True))")
        self.dataset = dataset
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.shuffle = bool(shuffle)
        self.drop_last = bool(drop_last)
        self.seed = None if seed is None else int(seed)
        self.device = get_device(device)
        self.epoch = 0  # number of iterations started so far (for seeded shuffles)

    def __len__(self) -> int:
        n = len(self.dataset) if self.sampler is None else len(self.sampler)
        if self.drop_last:
            return n // self.batch_size
        return -(-n // self.batch_size)

    def set_epoch(self, epoch: int) -> None:
        """The next ``iter()`` uses epoch ``epoch``'s permutation (seeded loaders)."""
        self.epoch = int(epoch)
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def _order(self) -> np.ndarray:
        if self.sampler is not None:
            return np.fromiter(iter(self.sampler), np.int64)
        n = len(self.dataset)
        if not self.shuffle:
            return np.arange(n)
        if self.seed is not None:
            gen = np.random.default_rng(np.random.SeedSequence(self.seed,
                                                               spawn_key=(self.epoch,)))
        else:
            gen = get_generator(cpu)
        return gen.permutation(n)

    def __iter__(self):
        order = self._order()
        self.epoch += 1
        bs = self.batch_size
        stop = len(self) * bs if self.drop_last else len(order)
        fetch = getattr(self.dataset, "get_batch", None)
        for start in range(0, stop, bs):
            idx = order[start:start + bs]
            if fetch is not None:
                fields = fetch(idx)
            else:
                fields = collate([self.dataset[int(i)] for i in idx])
            if isinstance(fields, dict):
                yield {k: self._to_tensor(f) for k, f in fields.items()}
            elif isinstance(fields, tuple):
                yield tuple(self._to_tensor(f) for f in fields)
            else:  # samples of one array: the batch itself, as PyTorch's
                yield self._to_tensor(fields)

    def _to_tensor(self, a) -> Tensor:
        dev = self.device
        if isinstance(a, Tensor):
            return a.to(dev)
        if device_of_array(a) is cpu:  # NumPy arrays, lists, numbers
            a = np.asarray(a)
            if dev is cpu:
                return _wrap(a, cpu, None, 0, False)  # fancy indexing already copied
        elif device_of_array(a) is dev:
            return _wrap(a, dev, None, 0, False)
        return Tensor(a, device=dev)

    def __repr__(self) -> str:
        return (f"DataLoader({self.dataset!r}, batch_size={self.batch_size}, "
                f"shuffle={self.shuffle}, drop_last={self.drop_last}, seed={self.seed}, "
                f"device='{self.device}')")
