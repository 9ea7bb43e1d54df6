"""DistributedSampler: PyTorch's shards (equal sizes, padding, drop_last, seed + epoch)."""

from __future__ import annotations

import numpy as np
import pytest

from tapegrad.data import DataLoader, DistributedSampler, TensorDataset


class _Len:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def _shards(n, replicas, **kw):
    return [list(DistributedSampler(_Len(n), replicas, r, **kw)) for r in range(replicas)]


@pytest.mark.parametrize("n", [1, 7, 10, 32, 33, 100])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
@pytest.mark.parametrize("shuffle", [False, True])
def test_shards_equal_disjoint_cover(n, replicas, shuffle):
    shards = _shards(n, replicas, shuffle=shuffle, seed=3)
    size = -(-n // replicas)
    assert all(len(s) == size for s in shards)
    flat = [i for s in shards for i in s]
    assert sorted(set(flat)) == list(range(n))  # covers the dataset
    pad = size * replicas - n
    assert len(flat) - len(set(flat)) == pad  # disjoint but for PyTorch's padding
    if pad == 0:
        assert len(set(flat)) == len(flat)


@pytest.mark.parametrize("n,replicas", [(10, 3), (33, 4), (32, 2), (5, 4)])
def test_drop_last_cuts_the_tail(n, replicas):
    shards = _shards(n, replicas, shuffle=True, drop_last=True)
    size = n // replicas
    assert all(len(s) == size for s in shards)
    flat = [i for s in shards for i in s]
    assert len(set(flat)) == len(flat) == size * replicas


def test_order_without_shuffle_is_pytorchs():
    # PyTorch: indices + indices[:pad], then rank r takes positions r, r + R, ...
    assert _shards(7, 3, shuffle=False) == [[0, 3, 6], [1, 4, 0], [2, 5, 1]]
    assert _shards(2, 4, shuffle=False) == [[0], [1], [0], [1]]


def test_against_torch_without_shuffle():
    torch_data = pytest.importorskip("torch.utils.data")
    for n, reps, drop in ((11, 3, False), (11, 3, True), (3, 5, False)):
        for r in range(reps):
            want = list(torch_data.DistributedSampler(range(n), reps, r, shuffle=False,
                                                      drop_last=drop))
            got = list(DistributedSampler(_Len(n), reps, r, shuffle=False, drop_last=drop))
            assert got == want


def test_seed_and_epoch():
    a = DistributedSampler(_Len(50), 2, 0, seed=1)
    b = DistributedSampler(_Len(50), 2, 0, seed=1)
    first = list(a)
    assert first == list(b) and first == list(a)  # a function of (seed, epoch) alone
    a.set_epoch(1)
    assert list(a) != first
    b.set_epoch(1)
    assert list(a) == list(b)


def test_under_mpirun_without_a_group(monkeypatch):
    from tapegrad.distributed import DistributedError

    monkeypatch.setenv("OMPI_COMM_WORLD_SIZE", "2")
    with pytest.raises(DistributedError, match="init_process_group"):
        DistributedSampler(_Len(4))
    assert len(DistributedSampler(_Len(4), num_replicas=2, rank=1)) == 2


def test_arguments(monkeypatch):
    for var in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "MPI_LOCALNRANKS"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="rank 2"):
        DistributedSampler(_Len(4), 2, 2)
    with pytest.raises(ValueError, match="num_replicas"):
        DistributedSampler(_Len(4), 0, 0)
    # no process group: one replica
    s = DistributedSampler(_Len(4))
    assert (s.num_replicas, s.rank, len(s)) == (1, 0, 4)


def test_dataloader_with_sampler():
    x = np.arange(10, dtype=np.float32)[:, None]
    ds = TensorDataset(x, np.arange(10))
    sampler = DistributedSampler(ds, 2, 1, shuffle=True, seed=0)
    loader = DataLoader(ds, batch_size=2, sampler=sampler)
    assert len(loader) == 3
    loader.set_epoch(4)  # passed on to the sampler
    assert sampler.epoch == 4
    seen = [int(i) for _, yb in loader for i in yb.numpy()]
    assert seen == list(sampler)
    with pytest.raises(ValueError, match="exclude each other"):
        DataLoader(ds, batch_size=2, sampler=sampler, shuffle=True)
