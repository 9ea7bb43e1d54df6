"""RandomSampler, SubsetRandomSampler, WeightedRandomSampler, BatchSampler (sampler.py)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.data import (
    BatchSampler,
    RandomSampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)
from tapegrad.errors import ArgumentError, ArgumentTypeError, ShapeError


def test_random_sampler_is_a_new_permutation_each_epoch():
    s = RandomSampler(range(50))
    a, b = list(s), list(s)
    assert sorted(a) == sorted(b) == list(range(50)) and a != b
    assert len(s) == 50 and s.num_samples == 50 and s.replacement is False


def test_random_sampler_num_samples_and_replacement():
    chained = list(RandomSampler(range(4), num_samples=10))  # two permutations + half of one
    assert len(chained) == 10 and sorted(chained[:4]) == sorted(chained[4:8]) == [0, 1, 2, 3]
    assert len(set(chained[8:])) == 2
    drawn = list(RandomSampler(range(3), replacement=True, num_samples=200))
    assert len(drawn) == 200 and set(drawn) == {0, 1, 2}
    assert len(list(RandomSampler(range(10), num_samples=3))) == 3


def test_random_sampler_follows_manual_seed_and_a_numpy_generator():
    tg.manual_seed(4)
    a = list(RandomSampler(range(30)))
    tg.manual_seed(4)
    assert list(RandomSampler(range(30))) == a
    g1, g2 = np.random.default_rng(7), np.random.default_rng(7)
    assert list(RandomSampler(range(30), generator=g1)) == list(RandomSampler(range(30),
                                                                               generator=g2))
    assert list(RandomSampler(range(30), generator=tg.random.get_generator())) != []


def test_random_sampler_refusals():
    with pytest.raises(ArgumentTypeError, match="replacement must be a bool"):
        RandomSampler(range(3), replacement=1)
    with pytest.raises(ArgumentError, match=r"num_samples must be a positive int.*empty"):
        RandomSampler(range(0))
    with pytest.raises(ArgumentError, match="num_samples"):
        RandomSampler(range(3), num_samples=0)
    with pytest.raises(ArgumentTypeError, match="numpy.random.Generator"):
        RandomSampler(range(3), generator=0)


def test_subset_random_sampler_keeps_the_given_indices():
    s = SubsetRandomSampler([10, 20, 30, 40])
    a = list(s)
    assert sorted(a) == [10, 20, 30, 40] and len(s) == 4
    g = SubsetRandomSampler(range(5, 15), generator=np.random.default_rng(1))
    h = SubsetRandomSampler(range(5, 15), generator=np.random.default_rng(1))
    assert list(g) == list(h) and sorted(list(g)) == list(range(5, 15))


def test_weighted_random_sampler():
    w = [0.0, 1.0, 3.0, 0.0]
    drawn = list(WeightedRandomSampler(w, 4000, generator=np.random.default_rng(0)))
    counts = np.bincount(drawn, minlength=4)
    assert counts[0] == counts[3] == 0 and 2.5 < counts[2] / counts[1] < 3.5
    once = list(WeightedRandomSampler(tg.tensor([1.0, 2.0, 3.0]), 3, replacement=False))
    assert sorted(once) == [0, 1, 2]
    s = WeightedRandomSampler(np.array([1, 2]), 5)
    assert len(s) == 5 and isinstance(s.weights, tg.Tensor) and s.weights.dtype == np.float64


def test_weighted_random_sampler_refusals():
    with pytest.raises(ArgumentError, match="num_samples"):
        WeightedRandomSampler([1.0], 0)
    with pytest.raises(ArgumentError, match="num_samples"):
        WeightedRandomSampler([1.0], True)
    with pytest.raises(ArgumentError, match="replacement"):
        WeightedRandomSampler([1.0], 1, replacement="yes")
    with pytest.raises(ShapeError, match="1-D"):
        WeightedRandomSampler([[1.0, 2.0]], 1)
    for bad in ([1.0, -1.0], [0.0, 0.0], [1.0, float("nan")]):
        with pytest.raises(ArgumentError, match="finite and >= 0"):
            WeightedRandomSampler(bad, 1)
    with pytest.raises(ArgumentError, match="nonzero weights"):
        WeightedRandomSampler([1.0, 0.0, 1.0], 3, replacement=False)


def test_batch_sampler():
    assert list(BatchSampler(SequentialSampler(range(10)), 3, False)) == [
        [0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert list(BatchSampler(range(10), 3, True)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert len(BatchSampler(range(10), 3, False)) == 4 and len(BatchSampler(range(9), 3, True)) == 3
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ArgumentError, match="batch_size must be a positive int"):
            BatchSampler(range(3), bad, False)
    with pytest.raises(ArgumentError, match="drop_last must be a bool"):
        BatchSampler(range(3), 2, 0)


@given(n=st.integers(0, 40), bs=st.integers(1, 12), drop=st.booleans())
def test_batch_sampler_against_torch(n, bs, drop):
    torch_data = pytest.importorskip("torch.utils.data")
    want = torch_data.BatchSampler(range(n), bs, drop)
    got = BatchSampler(range(n), bs, drop)
    assert list(got) == list(want) and len(got) == len(want)


def test_lengths_and_refusals_match_torch():
    torch = pytest.importorskip("torch")
    from torch.utils import data as td

    assert len(RandomSampler(range(7), num_samples=12)) == len(td.RandomSampler(range(7),
                                                                                 num_samples=12))
    assert len(list(RandomSampler(range(7), num_samples=12))) == len(
        list(td.RandomSampler(range(7), num_samples=12)))
    assert len(WeightedRandomSampler([1, 2], 9)) == len(td.WeightedRandomSampler([1, 2], 9))
    refused = [  # (ours, torch's): both refuse
        (lambda m: m.RandomSampler(range(0)), ValueError),
        (lambda m: m.RandomSampler(range(3), replacement=1), TypeError),
        (lambda m: m.WeightedRandomSampler([1.0], 0), ValueError),
        (lambda m: m.WeightedRandomSampler([[1.0]], 1), ValueError),
        (lambda m: m.BatchSampler(range(3), 0, False), ValueError),
        (lambda m: m.BatchSampler(range(3), 2, None), ValueError),
    ]
    for make, kind in refused:
        with pytest.raises(kind):
            make(td)
        with pytest.raises(kind):
            make(tg.data)
    assert torch.is_tensor(td.WeightedRandomSampler([1, 2], 1).weights)
