"""Samplers, as ``torch.utils.data``'s: the order in which a DataLoader visits a
dataset's indices (:class:`BatchSampler`: in which batches).

Randomness comes from ``generator=`` -- a ``numpy.random.Generator`` (tapegrad's
generators are NumPy ones: ``tapegrad.random.get_generator()``,
``numpy.random.default_rng(seed)``) -- or, when it is None, from tapegrad's global
CPU generator, so ``tapegrad.manual_seed(s)`` makes every sampler repeatable. The
draws are NumPy's, not PyTorch's random stream; counts, coverage and lengths are
PyTorch's.

:class:`DistributedSampler` gives each rank of a data-parallel job its own
shard, with PyTorch's rules: every rank gets the same number of indices (the
permutation is padded with its own first indices, or cut with ``drop_last``),
so no rank runs out of batches before the others and stalls them.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from ..args import is_int
from ..device import cpu, to_host
from ..errors import ArgumentError, ArgumentTypeError, ShapeError
from ..random import get_generator
from ..tensor import Tensor, _wrap

__all__ = ["Sampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
           "WeightedRandomSampler", "BatchSampler", "DistributedSampler"]


def _check_generator(generator, who: str) -> None:
    if generator is not None and not isinstance(generator, np.random.Generator):
        raise ArgumentTypeError(
            f"{who}: generator must be a numpy.random.Generator (e.g. "
            f"numpy.random.default_rng(seed) or tapegrad.random.get_generator()) or None for "
            f"tapegrad's global generator (seeded by tapegrad.manual_seed); got "
            f"{type(generator).__module__}.{type(generator).__name__}")


def _generator(generator, who: str) -> np.random.Generator:
    """``generator`` itself, or tapegrad's global CPU generator when it is None."""
    _check_generator(generator, who)
    return get_generator(cpu) if generator is None else generator


class Sampler:
    """Base class: iterating yields dataset indices; ``len()`` is how many."""

    def __iter__(self):
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError


class SequentialSampler(Sampler):
    """0, 1, ..., len(dataset) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A random order of ``data_source``'s indices, as PyTorch's.

    Without ``replacement``: a permutation (``num_samples`` beyond the length
    chains further permutations; fewer takes the start of one); with it,
    ``num_samples`` independent uniform draws. A new order on every ``iter()``.

    >>> loader = DataLoader(ds, batch_size=32, sampler=RandomSampler(ds, num_samples=1000,
    ...                                                              replacement=True))
    """

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator=None):
        if not isinstance(replacement, bool):
            raise ArgumentTypeError(f"RandomSampler: replacement must be a bool, got "
                                    f"{replacement!r}")
        _check_generator(generator, "RandomSampler")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        self.generator = generator
        if not is_int(self.num_samples) or self.num_samples <= 0:
            raise ArgumentError(f"RandomSampler: num_samples must be a positive int, got "
                                f"{self.num_samples!r}" + (" (the dataset is empty)"
                                                           if num_samples is None else ""))

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def _draw(self, gen) -> np.ndarray:
        n, k = len(self.data_source), int(self.num_samples)
        if n == 0:
            raise ArgumentError("RandomSampler: cannot draw from an empty data source")
        if self.replacement:
            return gen.integers(0, n, size=k)
        perms = [gen.permutation(n) for _ in range(k // n)]
        if k % n:  # PyTorch always draws this last one; skipping it keeps k == n to one draw
            perms.append(gen.permutation(n)[:k % n])
        return np.concatenate(perms)

    def __iter__(self):
        return iter(self._draw(_generator(self.generator, "RandomSampler")).tolist())

    def __len__(self) -> int:
        return self.num_samples


class _EpochSeededSampler(RandomSampler):
    """``DataLoader(shuffle=True, seed=s)``'s sampler: epoch e's permutation depends
    on ``(s, e)`` alone, so a run resumes with ``set_epoch``."""

    def __init__(self, data_source, seed: int):
        super().__init__(data_source)
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        gen = np.random.default_rng(np.random.SeedSequence(self.seed, spawn_key=(self.epoch,)))
        return iter(gen.permutation(len(self.data_source)).tolist())


class SubsetRandomSampler(Sampler):
    """The given ``indices`` in a random order, a new one on every ``iter()``.

    >>> train = SubsetRandomSampler(range(0, 50000)); val = SubsetRandomSampler(range(50000, 60000))
    """

    def __init__(self, indices, generator=None):
        _check_generator(generator, "SubsetRandomSampler")
        self.indices = indices
        self.generator = generator

    def __iter__(self):
        gen = _generator(self.generator, "SubsetRandomSampler")
        for i in gen.permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self) -> int:
        return len(self.indices)


class WeightedRandomSampler(Sampler):
    """``num_samples`` indices of ``[0, len(weights))`` drawn with probability
    proportional to ``weights`` (with ``replacement``, or each index at most once).

    Weights are checked here (1-D, finite, >= 0, a positive sum, enough nonzero ones
    without replacement); PyTorch checks them when iterating.

    >>> counts = np.bincount(labels); w = 1.0 / counts[labels]   # balance the classes
    >>> sampler = WeightedRandomSampler(w, num_samples=len(w))
    """

    def __init__(self, weights, num_samples: int, replacement: bool = True, generator=None):
        if not is_int(num_samples) or num_samples <= 0:
            raise ArgumentError(f"WeightedRandomSampler: num_samples must be a positive int, "
                                f"got {num_samples!r}")
        if not isinstance(replacement, bool):
            raise ArgumentError(f"WeightedRandomSampler: replacement must be a bool, got "
                                f"{replacement!r}")
        _check_generator(generator, "WeightedRandomSampler")
        w = to_host(weights.array if isinstance(weights, Tensor) else weights)
        w = np.asarray(w, dtype=np.float64)
        if w.ndim != 1:
            raise ShapeError(f"WeightedRandomSampler: weights must be a 1-D sequence, got shape "
                             f"{w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
            raise ArgumentError("WeightedRandomSampler: weights must be finite and >= 0 with a "
                                "positive sum")
        if not replacement and num_samples > np.count_nonzero(w):
            raise ArgumentError(f"WeightedRandomSampler: without replacement num_samples "
                                f"({num_samples}) cannot exceed the number of nonzero weights "
                                f"({np.count_nonzero(w)})")
        self.weights = _wrap(w, cpu, None, 0, False)  # a float64 Tensor, as PyTorch's
        self.num_samples = int(num_samples)
        self.replacement = replacement
        self.generator = generator

    def __iter__(self):
        w = self.weights.array
        gen = _generator(self.generator, "WeightedRandomSampler")
        drawn = gen.choice(w.size, size=self.num_samples, replace=self.replacement, p=w / w.sum())
        return iter(drawn.tolist())

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    """Lists of ``batch_size`` consecutive indices of ``sampler`` (any iterable of
    indices); ``drop_last`` drops a shorter last list.

    >>> list(BatchSampler(SequentialSampler(range(10)), batch_size=3, drop_last=False))
    [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    """

    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not is_int(batch_size) or batch_size <= 0:
            raise ArgumentError(f"BatchSampler: batch_size must be a positive int, got "
                                f"{batch_size!r}")
        if not isinstance(drop_last, (bool, np.bool_)):
            raise ArgumentError(f"BatchSampler: drop_last must be a bool, got {drop_last!r}")
        self.sampler = sampler
        self.batch_size = int(batch_size)
        self.drop_last = bool(drop_last)

    def __iter__(self):
        it = iter(self.sampler)
        while True:
            batch = list(itertools.islice(it, self.batch_size))
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                return
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class DistributedSampler(Sampler):
    """Rank ``rank``'s shard of ``dataset``, as ``torch.utils.data.DistributedSampler``.

    The indices (a permutation drawn from ``seed + epoch`` with ``shuffle``, else
    in order) are padded by repeating their start to a multiple of
    ``num_replicas`` (or, with ``drop_last``, cut to one), and rank r takes every
    ``num_replicas``-th from position r. ``num_replicas`` and ``rank`` default to
    the default process group's (one replica in a process started alone). Call
    :meth:`set_epoch` before each epoch for a new permutation (the same on every
    rank). The permutation comes from NumPy's generator, so its order differs from
    PyTorch's ``randperm``; the shards' sizes, padding and coverage are PyTorch's.

    >>> sampler = DistributedSampler(train, shuffle=True, seed=0)
    >>> loader = DataLoader(train, batch_size=16, sampler=sampler)
    >>> for epoch in range(epochs):
    ...     sampler.set_epoch(epoch)
    """

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False):
        if num_replicas is None or rank is None:
            from ..distributed import group as groups
            from ..distributed import world

            group = world.default_group() if world.is_initialized() else None
            if group is None and (groups.launched_world_size() or 1) > 1:
                # started by mpirun -n N but no group yet: one replica would silently
                # give every rank the whole dataset
                raise groups.DistributedError(
                    "DistributedSampler: this process is one of several MPI ranks, but the "
                    "process group is not initialized; call tapegrad.distributed."
                    "init_process_group('mpi') first, or pass num_replicas= and rank=")
            if num_replicas is None:
                num_replicas = 1 if group is None else group.size
            if rank is None:
                rank = 0 if group is None else group.rank
        for name, v, lo in (("num_replicas", num_replicas, 1), ("rank", rank, 0)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
                raise ArgumentError(f"DistributedSampler: {name} must be an int >= {lo}, got "
                                    f"{v!r}")
        if rank >= num_replicas:
            raise ArgumentError(f"DistributedSampler: rank {rank} is not in [0, "
                                f"{num_replicas - 1}] (num_replicas={num_replicas})")
        self.dataset = dataset
        self.num_replicas = int(num_replicas)
        self.rank = int(rank)
        self.shuffle = bool(shuffle)
        self.seed = int(seed)
        self.drop_last = bool(drop_last)
        self.epoch = 0
        n = len(dataset)
        if self.drop_last and n % self.num_replicas:
            # the shard size that drops the tail so that every rank gets as many
            self.num_samples = math.ceil((n - self.num_replicas) / self.num_replicas)
        else:
            self.num_samples = math.ceil(n / self.num_replicas)
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        n = len(self.dataset)
        if self.shuffle:
            indices = np.random.default_rng(self.seed + self.epoch).permutation(n)
        else:
            indices = np.arange(n)
        if not self.drop_last:
            pad = self.total_size - n
            if pad > 0:  # repeat the start, as often as needed for tiny datasets
                reps = math.ceil(pad / n)
                indices = np.concatenate([indices, np.tile(indices, reps)[:pad]])
        else:
            indices = indices[:self.total_size]
        return iter(indices[self.rank:self.total_size:self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        """Epoch ``epoch``'s permutation for the next iteration (the same on every rank)."""
        self.epoch = int(epoch)
