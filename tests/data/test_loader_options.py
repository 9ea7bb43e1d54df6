"""DataLoader's PyTorch options: batch_sampler, collate_fn, generator, batch_size=None,
IterableDataset, worker options, exclusions (loader.py), against torch where installed."""

import numpy as np
import pytest
from batch_structure import sig, values

import tapegrad as tg
from tapegrad.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
    TensorDataset,
    default_collate,
    default_convert,
    get_worker_info,
)
from tapegrad.device import cpu
from tapegrad.errors import ArgumentError, ArgumentTypeError
from tapegrad.random import get_generator
from tapegrad.testing.fakedevice import FakeArray, fake_device

DEV = fake_device()


def _ds(n=10):
    return TensorDataset(np.arange(n * 2, dtype=np.float32).reshape(n, 2), np.arange(n))


class Count(IterableDataset):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter((np.full(2, i, np.float32), i) for i in range(self.n))

    def __len__(self):
        return self.n


def _labels(loader):
    return [b[1].tolist() for b in loader]


def test_attributes_as_pytorch():
    ds = _ds()
    dl = DataLoader(ds, batch_size=3)
    assert dl.dataset is ds and dl.batch_size == 3 and dl.drop_last is False
    assert type(dl.sampler) is SequentialSampler and type(dl.batch_sampler) is BatchSampler
    assert dl.collate_fn is default_collate and dl.generator is None and len(dl) == 4
    assert isinstance(DataLoader(ds, shuffle=True).sampler, RandomSampler)
    assert DataLoader(ds, batch_size=None).collate_fn is default_convert
    with pytest.raises(ValueError, match="batch_size cannot be changed"):
        dl.batch_size = 4
    dl.set_epoch(3)  # other attributes stay settable
    assert dl.epoch == 3


def test_shuffle_streams_unchanged():
    n = 37
    tg.manual_seed(5)
    got = next(iter(DataLoader(_ds(n), n, shuffle=True)))[1].tolist()
    tg.manual_seed(5)
    assert got == get_generator(cpu).permutation(n).tolist()
    dl = DataLoader(_ds(n), n, shuffle=True, seed=9)
    for epoch in range(2):
        want = np.random.default_rng(np.random.SeedSequence(9, spawn_key=(epoch,))).permutation(n)
        assert next(iter(dl))[1].tolist() == want.tolist()


def test_generator_option():
    a = _labels(DataLoader(_ds(30), 30, shuffle=True, generator=np.random.default_rng(1)))
    b = _labels(DataLoader(_ds(30), 30, shuffle=True, generator=np.random.default_rng(1)))
    assert a == b and sorted(a[0]) == list(range(30))
    with pytest.raises(ArgumentError, match="seed and generator exclude each other"):
        DataLoader(_ds(), shuffle=True, seed=1, generator=np.random.default_rng(1))
    with pytest.raises(ArgumentTypeError, match="numpy.random.Generator"):
        DataLoader(_ds(), shuffle=True, generator="torch")


def test_batch_sampler_option():
    bs = BatchSampler(SequentialSampler(range(10)), 4, drop_last=True)
    dl = DataLoader(_ds(), batch_sampler=bs)
    assert dl.batch_size is None and dl.drop_last is False and len(dl) == 2
    assert _labels(dl) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    custom = DataLoader(_ds(), batch_sampler=[[9, 0], [5]])  # any iterable of index lists
    assert _labels(custom) == [[9, 0], [5]]
    sampler = DistributedSampler(_ds(), 2, 1, shuffle=True)
    dl = DataLoader(_ds(), batch_sampler=BatchSampler(sampler, 2, False))
    dl.set_epoch(4)
    assert sampler.epoch == 4


def test_collate_fn_and_getitems():
    seen = []

    def collate_fn(samples):
        seen.append(len(samples))
        return {"n": len(samples), "x": tg.tensor(np.stack([s[0] for s in samples]))}

    out = list(DataLoader(_ds(5), batch_size=2, collate_fn=collate_fn))
    assert seen == [2, 2, 1] and [o["n"] for o in out] == [2, 2, 1]
    assert out[0]["x"].shape == (2, 2)
    with pytest.raises(ArgumentTypeError, match="collate_fn must be callable"):
        DataLoader(_ds(), collate_fn=3)

    class Batched(Dataset):
        calls = []

        def __len__(self):
            return 6

        def __getitem__(self, i):
            raise AssertionError("read through __getitems__")

        def __getitems__(self, indices):
            Batched.calls.append(list(indices))
            return [(np.float32(i), i) for i in indices]

    assert _labels(DataLoader(Batched(), 4)) == [[0, 1, 2, 3], [4, 5]]
    assert Batched.calls == [[0, 1, 2, 3], [4, 5]]


def test_unbatched_loading():
    dl = DataLoader(_ds(3), batch_size=None)
    first = next(iter(dl))
    assert isinstance(first, tuple) and isinstance(first[0], tg.Tensor) and first[0].shape == (2,)
    assert len(dl) == 3
    # PyTorch's fast path: a batch sampler as the sampler, the dataset indexed by lists
    fast = DataLoader(_ds(5), batch_size=None, sampler=BatchSampler(range(5), 2, False))
    assert [y.tolist() for _, y in fast] == [[0, 1], [2, 3], [4]]


def test_iterable_dataset():
    dl = DataLoader(Count(7), batch_size=3)
    assert _labels(dl) == [[0, 1, 2], [3, 4, 5], [6]] and len(dl) == 3
    assert _labels(DataLoader(Count(7), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5]]
    assert len(DataLoader(Count(7), 3, drop_last=True)) == 2
    assert [s[1] for s in DataLoader(Count(3), batch_size=None)] == [0, 1, 2]
    assert _labels(DataLoader(Count(4), 2)) == _labels(DataLoader(Count(4), 2))  # re-iterable
    assert DataLoader(Count(2)).sampler is None and get_worker_info() is None
    for kw in (dict(shuffle=True), dict(sampler=range(3)), dict(batch_sampler=[[0]])):
        with pytest.raises(ArgumentError, match="IterableDataset"):
            DataLoader(Count(3), **kw)

    class NoLen(IterableDataset):
        def __iter__(self):
            return iter(range(3))

    with pytest.raises(TypeError, match="has no length"):
        len(DataLoader(NoLen()))


def test_worker_options_accepted_with_workers_and_refused_without():
    calls = []
    dl = DataLoader(_ds(), 4, num_workers=2, timeout=5, worker_init_fn=calls.append,
                    prefetch_factor=4, persistent_workers=True, multiprocessing_context="fork",
                    pin_memory=True, pin_memory_device="cuda", in_order=False)
    assert _labels(dl) == _labels(DataLoader(_ds(), 4)) and calls == []
    for kw in (dict(timeout=5), dict(prefetch_factor=2), dict(persistent_workers=True),
               dict(multiprocessing_context="fork")):
        with pytest.raises(ArgumentError, match="needs num_workers > 0"):
            DataLoader(_ds(), **kw)
    for kw in (dict(timeout=-1), dict(num_workers=2, prefetch_factor=-1), dict(num_workers=1.5)):
        with pytest.raises(ArgumentError):
            DataLoader(_ds(), **kw)


EXCLUSIVE = [
    dict(shuffle=True, sampler=range(10)),
    dict(batch_sampler=[[0, 1]], batch_size=2),
    dict(batch_sampler=[[0, 1]], shuffle=True),
    dict(batch_sampler=[[0, 1]], sampler=range(10)),
    dict(batch_sampler=[[0, 1]], drop_last=True),
    dict(batch_size=None, drop_last=True),
    dict(batch_size=0),
    dict(num_workers=-1),
    dict(timeout=-1),
    dict(prefetch_factor=2),
    dict(persistent_workers=True),
    dict(multiprocessing_context="fork"),
    dict(timeout=5),  # torch: AssertionError at the first batch
]


@pytest.mark.parametrize("kw", EXCLUSIVE, ids=lambda kw: ",".join(kw))
def test_refusals_as_torch(kw):
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader as TorchLoader
    from torch.utils.data import TensorDataset as TorchTD

    with pytest.raises((ValueError, AssertionError)):
        next(iter(TorchLoader(TorchTD(torch.zeros(10, 2)), **kw)))
    with pytest.raises(ArgumentError):  # a ValueError
        DataLoader(_ds(), **kw)


def test_batches_and_lengths_as_torch():
    torch = pytest.importorskip("torch")
    from torch.utils import data as td

    class TorchCount(td.IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter((np.full(2, i, np.float32), i) for i in range(self.n))

        def __len__(self):
            return self.n

    x, y = np.arange(14, dtype=np.float32).reshape(7, 2), np.arange(7)
    torch_ds = td.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    pairs = []
    for kw in (dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None),
               dict(batch_sampler=[[6, 1], [2]]), dict(sampler=[3, 3, 0], batch_size=2)):
        pairs.append((DataLoader(TensorDataset(x, y), **kw), td.DataLoader(torch_ds, **kw)))
    for kw in (dict(batch_size=3), dict(batch_size=3, drop_last=True), dict(batch_size=None)):
        pairs.append((DataLoader(Count(7), **kw), td.DataLoader(TorchCount(7), **kw)))
    for ours, theirs in pairs:
        assert len(ours) == len(theirs)
        got, want = list(ours), list(theirs)
        assert [sig(b) for b in got] == [sig(b) for b in want]
        assert [values(b) for b in got] == [values(b) for b in want]


def test_device_batches_of_every_path():
    x = tg.tensor(np.arange(12.0).reshape(6, 2), device=DEV)
    y = tg.tensor(np.arange(6), device=DEV)
    both = TensorDataset(x, y) + TensorDataset(x, y)
    (bx, by), = list(DataLoader(both, 12, shuffle=True, seed=0, device=DEV))
    assert isinstance(bx.array, FakeArray) and sorted(by.tolist()) == sorted(list(range(6)) * 2)
    custom = next(iter(DataLoader(_ds(4), 2, collate_fn=lambda s: (tg.tensor([1.0]), "k"),
                                  device=DEV)))
    assert custom[0].device is DEV and custom[1] == "k"
    one = next(iter(DataLoader(_ds(4), batch_size=None, device=DEV)))
    assert one[0].device is DEV and one[0].shape == (2,)
    streamed = next(iter(DataLoader(Count(4), 4, device=DEV)))
    assert streamed[0].device is DEV and streamed[1].tolist() == [0, 1, 2, 3]
