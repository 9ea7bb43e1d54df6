"""Samplers: the order in which a DataLoader visits a dataset's indices.

:class:`DistributedSampler` gives each rank of a data-parallel job its own
shard, with PyTorch's rules: every rank gets the same number of indices (the
permutation is padded with its own first indices, or cut with ``drop_last``),
so no rank runs out of batches before the others and stalls them.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import ArgumentError

__all__ = ["Sampler", "SequentialSampler", "DistributedSampler"]


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
