"""DataLoader: mini-batches of a dataset as Tensors, with ``torch.utils.data``'s options."""

from __future__ import annotations

import itertools

import numpy as np

from ..args import is_int
from ..device import cpu, device_of_array, get_device
from ..errors import ArgumentError, ArgumentTypeError
from ..tensor import Tensor, _wrap
from .collate import collate, default_collate, default_convert, to_tensors
from .dataset import IterableDataset, batch_reader
from .sampler import (
    BatchSampler,
    RandomSampler,
    SequentialSampler,
    _check_generator,
    _EpochSeededSampler,
)

__all__ = ["DataLoader", "collate", "default_collate", "default_convert", "get_worker_info"]

# PyTorch refuses to change these after construction: the samplers are built from them
_FIXED = frozenset({"batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                    "persistent_workers"})


def get_worker_info():
    """None: batches are built in the calling process (PyTorch's answer outside a
    worker), so an IterableDataset that splits its work per worker reads it all."""
    return None


class DataLoader:
    """Iterate over ``dataset`` in mini-batches of the samples' structure: a tuple
    of Tensors for tuple samples (``TensorDataset``), a dict for dict samples, one
    Tensor for samples of one array (:func:`~tapegrad.data.default_collate`).

    >>> loader = DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, seed=0)
    >>> for xb, yb in loader: ...

    - ``shuffle``: a new permutation every epoch (every ``iter()``). With
      ``seed`` given, epoch *e*'s permutation depends only on ``(seed, e)``,
      so runs are reproducible and :meth:`set_epoch` can resume mid-sequence;
      else it is drawn from ``generator`` (a ``numpy.random.Generator``) or
      tapegrad's global CPU generator, so ``tapegrad.manual_seed`` makes it
      repeatable. ``loader.sampler`` is then a :class:`RandomSampler`.
    - ``drop_last``: skip a last batch smaller than ``batch_size``;
      ``batch_size=None`` yields samples one by one, unbatched (their arrays as
      Tensors: :func:`default_convert`).
    - ``sampler`` (indices to visit, e.g. a :class:`DistributedSampler`) excludes
      ``shuffle``; ``batch_sampler`` (lists of indices) excludes ``batch_size``,
      ``shuffle``, ``sampler`` and ``drop_last``, as in PyTorch.
      :meth:`set_epoch` is passed on to them.
    - ``collate_fn``: turns a list of samples into a batch (its output is yielded
      as it is; Tensors in it are moved to ``device``).
    - ``device``: where the batches' Tensors live (``"cpu"``, ``"cuda"``...).
    - An :class:`IterableDataset` is read in its own order, ``batch_size``
      consecutive samples a batch; it takes no ``shuffle``, ``sampler`` or
      ``batch_sampler``.

    Batches are built in this process: PyTorch's worker options (``num_workers``,
    ``pin_memory``, ``timeout``, ``worker_init_fn``, ``prefetch_factor``,
    ``persistent_workers``, ``multiprocessing_context``) are accepted with
    PyTorch's checks and change nothing (``worker_init_fn`` is never called).
    Datasets with ``get_batch(indices)`` (``TensorDataset``, ``Subset``,
    ``ConcatDataset`` of those) are batched by fancy indexing, one copy per field;
    others are read sample by sample (``__getitems__`` when defined) and collated.
    """

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = False,
                 drop_last: bool = False, seed: int | None = None, device="cpu", *,
                 sampler=None, batch_sampler=None, num_workers: int = 0, collate_fn=None,
                 pin_memory: bool = False, timeout: float = 0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None,
                 prefetch_factor: int | None = None, persistent_workers: bool = False,
                 pin_memory_device: str = "", in_order: bool = True):
        _check_workers(num_workers, timeout, prefetch_factor, persistent_workers,
                       multiprocessing_context)
        if batch_size is not None and (not is_int(batch_size) or batch_size < 1):
            raise ArgumentError(f"DataLoader: batch_size must be a positive int, or None for "
                                f"unbatched samples, got {batch_size!r}")
        if collate_fn is not None and not callable(collate_fn):
            raise ArgumentTypeError(f"DataLoader: collate_fn must be callable (a list of "
                                    f"samples -> a batch), got {type(collate_fn).__name__}")
        _check_generator(generator, "DataLoader")
        if seed is not None and generator is not None:
            raise ArgumentError("DataLoader: seed and generator exclude each other (both seed "
                                "the shuffle); give one")
        iterable = isinstance(dataset, IterableDataset)
        if iterable:
            _check_stream_options(dataset, shuffle, sampler, batch_sampler)
        shuffle = bool(shuffle)
        if sampler is not None and shuffle:
            raise ArgumentError("DataLoader: sampler and shuffle=True exclude each other; "
                                "let the sampler shuffle (DistributedSampler(shuffle=True))")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ArgumentError("DataLoader: batch_sampler excludes batch_size, shuffle, "
                                    "sampler and drop_last (the batch sampler decides them); "
                                    "leave those at their defaults")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ArgumentError("DataLoader: batch_size=None (unbatched samples) excludes "
                                "drop_last")
        if sampler is None and not iterable:
            if not shuffle:
                sampler = SequentialSampler(dataset)
            elif seed is not None:
                sampler = _EpochSeededSampler(dataset, int(seed))
            else:
                sampler = RandomSampler(dataset, generator=generator)
        if batch_size is not None and not iterable:
            batch_sampler = BatchSampler(sampler, int(batch_size), bool(drop_last))
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None or (
                iterable and batch_size is not None) else default_convert

        self.dataset = dataset
        self.batch_size = None if batch_size is None else int(batch_size)
        self.drop_last = bool(drop_last)
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.collate_fn = collate_fn
        self.generator = generator
        self.shuffle = shuffle
        self.seed = None if seed is None else int(seed)
        self.device = get_device(device)
        self.num_workers = int(num_workers)
        self.pin_memory = bool(pin_memory)
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = multiprocessing_context
        self.prefetch_factor = prefetch_factor
        self.persistent_workers = bool(persistent_workers)
        self.pin_memory_device = pin_memory_device
        self.in_order = in_order
        self.epoch = 0  # number of iterations started so far (for seeded shuffles)
        self._initialized = True

    def __setattr__(self, name, value):
        if name in _FIXED and self.__dict__.get("_initialized"):
            raise ArgumentError(f"DataLoader: {name} cannot be changed once the DataLoader is "
                                "made (its samplers are built from it); make a new DataLoader")
        object.__setattr__(self, name, value)

    def __len__(self) -> int:
        if isinstance(self.dataset, IterableDataset):
            n = len(self.dataset)
            if self.batch_size is None:
                return n
            return n // self.batch_size if self.drop_last else -(-n // self.batch_size)
        if self.batch_sampler is not None:
            return len(self.batch_sampler)
        return len(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        """The next ``iter()`` uses epoch ``epoch``'s permutation (seeded loaders);
        passed on to the sampler and batch sampler that have ``set_epoch``."""
        self.epoch = int(epoch)
        seen = set()
        for s in (self.sampler, self.batch_sampler, getattr(self.batch_sampler, "sampler", None)):
            if s is not None and id(s) not in seen and hasattr(s, "set_epoch"):
                seen.add(id(s))
                s.set_epoch(epoch)

    def __iter__(self):
        if isinstance(self.sampler, _EpochSeededSampler):
            self.sampler.set_epoch(self.epoch)
        self.epoch += 1
        if isinstance(self.dataset, IterableDataset):
            yield from self._stream()
        elif self.batch_sampler is None:  # batch_size=None: one sample per index
            for index in self.sampler:
                yield self._converted(self.dataset[index])
        else:
            yield from self._batches()

    def _batches(self):
        reader = batch_reader(self.dataset) if self.collate_fn is default_collate else None
        getitems = getattr(self.dataset, "__getitems__", None)
        for batch in self.batch_sampler:
            if reader is not None:
                idx = np.asarray(batch)
                if idx.ndim == 1 and idx.size and idx.dtype.kind in "iu":
                    yield self._fields(reader(idx.astype(np.int64, copy=False)))
                    continue
            if callable(getitems):
                samples = getitems(list(batch))
            else:
                samples = [self.dataset[i] for i in batch]
            yield self._collated(samples)

    def _stream(self):
        it = iter(self.dataset)
        if self.batch_size is None:
            for sample in it:
                yield self._converted(sample)
            return
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield self._collated(batch)

    def _collated(self, samples):
        if self.collate_fn is default_collate:  # straight to the target device
            return to_tensors(collate(samples), self.device)
        return self._moved(self.collate_fn(samples))

    def _converted(self, sample):
        if self.collate_fn is default_convert:
            return to_tensors(sample, self.device)
        return self._moved(self.collate_fn(sample))

    def _moved(self, out):
        return out if self.device is cpu else to_tensors(out, self.device, arrays=False)

    def _fields(self, fields):
        """``get_batch``'s tuple, dict or array of arrays -> the same of Tensors."""
        if isinstance(fields, dict):
            return {k: self._to_tensor(f) for k, f in fields.items()}
        if isinstance(fields, tuple):
            return tuple(self._to_tensor(f) for f in fields)
        return self._to_tensor(fields)  # samples of one array: the batch itself, as PyTorch's

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


def _check_workers(num_workers, timeout, prefetch_factor, persistent_workers, context):
    """PyTorch's checks of its worker options; with workers they then have no effect."""
    if not is_int(num_workers) or num_workers < 0:
        raise ArgumentError(f"DataLoader: num_workers must be an int >= 0, got "
                            f"{num_workers!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float, np.number)) \
            or not timeout >= 0:
        raise ArgumentError(f"DataLoader: timeout must be a number of seconds >= 0, got "
                            f"{timeout!r}")
    if prefetch_factor is not None and (not is_int(prefetch_factor) or prefetch_factor < 0):
        raise ArgumentError(f"DataLoader: prefetch_factor must be an int >= 0 or None, got "
                            f"{prefetch_factor!r}")
    if num_workers == 0:
        given = {"timeout": timeout != 0, "prefetch_factor": prefetch_factor is not None,
                 "persistent_workers": bool(persistent_workers),
                 "multiprocessing_context": context is not None}
        for name, is_set in given.items():
            if is_set:
                raise ArgumentError(f"DataLoader: {name} applies to worker processes and "
                                    f"needs num_workers > 0, as in PyTorch; leave it at its "
                                    f"default with num_workers=0")


def _check_stream_options(dataset, shuffle, sampler, batch_sampler):
    """An IterableDataset decides its own order: PyTorch refuses these options."""
    name = type(dataset).__name__
    if shuffle not in (None, False):
        raise ArgumentError(f"DataLoader: an IterableDataset ({name}) takes no shuffle, got "
                            f"shuffle={shuffle!r}; shuffle inside its __iter__")
    for option, value in (("sampler", sampler), ("batch_sampler", batch_sampler)):
        if value is not None:
            raise ArgumentError(f"DataLoader: an IterableDataset ({name}) takes no {option} "
                                f"(its __iter__ gives the order); leave {option}=None")
