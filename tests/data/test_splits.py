"""random_split, Subset, ConcatDataset, ChainDataset, StackDataset, IterableDataset
(dataset.py)."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.data import (
    ChainDataset,
    ConcatDataset,
    DataLoader,
    Dataset,
    IterableDataset,
    StackDataset,
    Subset,
    TensorDataset,
    random_split,
)
from tapegrad.errors import (
    ArgumentError,
    ArgumentTypeError,
    OutOfRangeError,
    ShapeError,
    TapegradError,
)


def _ds(n, start=0):
    return TensorDataset(np.arange(start, start + n, dtype=np.float32)[:, None],
                         np.arange(start, start + n))


class Count(IterableDataset):
    def __init__(self, stop, start=0):
        self.start, self.stop = start, stop

    def __iter__(self):
        return iter(range(self.start, self.stop))

    def __len__(self):
        return self.stop - self.start


# ---------------------------------------------------------------- random_split

def test_random_split_counts_and_fractions():
    parts = random_split(_ds(10), [3, 7])
    assert [len(p) for p in parts] == [3, 7] and all(isinstance(p, Subset) for p in parts)
    seen = sorted(i for p in parts for i in p.indices)
    assert seen == list(range(10)) and isinstance(parts[0].indices, list)
    assert [len(p) for p in random_split(range(10), [0.33, 0.33, 0.34])] == [4, 3, 3]
    assert [len(p) for p in random_split(range(7), [0.5, 0.5])] == [4, 3]  # round-robin
    assert [len(p) for p in random_split(range(11), [0.1] * 10)] == [2] + [1] * 9


def test_random_split_follows_manual_seed_and_generator():
    tg.manual_seed(2)
    a = [p.indices for p in random_split(range(20), [0.5, 0.5])]
    tg.manual_seed(2)
    assert [p.indices for p in random_split(range(20), [0.5, 0.5])] == a
    g = [random_split(range(20), [5, 15], generator=np.random.default_rng(3))[0].indices
         for _ in range(2)]
    assert g[0] == g[1]


def test_random_split_refusals_and_warning():
    for lengths in ([3, 8], [0.5, 0.6], [-1, 11], [2.5, 7.5]):
        with pytest.raises(ArgumentError, match="random_split"):
            random_split(range(10), lengths)
    with pytest.raises(ArgumentError, match="between 0 and 1"):
        random_split(range(10), [1.5, -0.5])
    with pytest.raises(ArgumentTypeError, match="lengths"):
        random_split(range(10), 5)
    with pytest.raises(ArgumentTypeError, match="generator"):
        random_split(range(10), [5, 5], generator=42)
    with pytest.warns(UserWarning) as caught:
        sizes = [len(p) for p in random_split(range(2), [0.9, 0.05, 0.05])]
    assert sizes == [2, 0, 0]  # floors [1, 0, 0], the remainder to the first
    assert [str(w.message) for w in caught] == [
        f"random_split: split {k} has length 0 (an empty dataset)" for k in (1, 2)]


_lengths = st.one_of(
    st.lists(st.integers(0, 12), min_size=1, max_size=5),
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=5).map(
        lambda f: [x / sum(f) for x in f] if sum(f) > 0 else f),
)


@given(n=st.integers(0, 30), lengths=_lengths)
def test_random_split_sizes_and_refusals_as_torch(n, lengths):
    torch_data = pytest.importorskip("torch.utils.data")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # both warn about empty splits
        try:
            want = [len(s) for s in torch_data.random_split(range(n), lengths)]
        except (ValueError, TypeError):
            want = None
        try:
            got = random_split(range(n), lengths)
        except TapegradError:
            got = None
    if want is None:
        assert got is None
    else:
        assert [len(s) for s in got] == want
        assert sorted(i for s in got for i in s.indices) == list(range(n))


# ---------------------------------------------------------------------- Subset

def test_subset_indices_as_pytorch():
    sub = Subset(_ds(10), [9, 2, 5])
    assert sub.indices == [9, 2, 5]  # kept as given
    assert sub[1][1] == 2 and sub[-1][1] == 5
    xs, ys = sub[[0, 2]]  # a list reads dataset[[...]]
    assert ys.tolist() == [9, 5]
    assert sub[0:2][1].tolist() == [9, 2]
    assert [s[1] for s in sub.__getitems__([2, 0])] == [5, 9]
    nested = Subset(sub, [2, 0])
    assert [int(y) for _, y in DataLoader(nested, 1)] == [5, 9]
    mask = Subset(_ds(4), np.array([True, False, True, False]))
    assert mask.indices.tolist() == [0, 2] and len(mask) == 2
    assert Subset(_ds(4), range(1, 3)).indices == range(1, 3)
    with pytest.raises(ArgumentTypeError, match="integers"):
        Subset(_ds(4), [0.5])
    with pytest.raises(ShapeError, match="one-dimensional"):
        Subset(_ds(4), [[0, 1]])


def test_subset_subclass_overriding_getitem_is_read_sample_by_sample():
    class Doubled(Subset):
        def __getitem__(self, i):
            x, y = super().__getitem__(i)
            return x, y * 2

    (_, yb), = list(DataLoader(Doubled(_ds(5), [1, 3]), 2))
    assert yb.tolist() == [2, 6]


def test_subset_against_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import Subset as TorchSubset
    from torch.utils.data import TensorDataset as TorchTD

    theirs = TorchSubset(TorchTD(torch.arange(10)), [9, 2, 5])
    ours = Subset(TensorDataset(np.arange(10)), [9, 2, 5])
    assert ours.indices == theirs.indices and len(ours) == len(theirs)
    for i in (0, -1, [0, 2]):
        assert np.asarray(ours[i][0]).tolist() == theirs[i][0].tolist()


# ---------------------------------------------------------------- ConcatDataset

def test_concat_dataset_and_add():
    a, b = _ds(3), _ds(4, start=10)
    c = a + b
    assert isinstance(c, ConcatDataset) and len(c) == 7 and c.cumulative_sizes == [3, 7]
    assert c[3][1] == 10 and c[-1][1] == 13 and c[2][1] == 2
    assert [int(s[1]) for s in c] == [0, 1, 2, 10, 11, 12, 13]  # iteration stops at the end
    batches = [y.tolist() for _, y in DataLoader(c, 3)]
    assert batches == [[0, 1, 2], [10, 11, 12], [13]]
    mixed = c.get_batch(np.array([5, 0, -1, 1, 3]))
    assert mixed[1].tolist() == [12, 0, 13, 1, 10] and mixed[0].shape == (5, 1)
    assert c.get_batch(np.array([], np.int64))[0].shape == (0, 1)
    tg.manual_seed(0)
    seen = sorted(int(v) for _, y in DataLoader(c, 2, shuffle=True) for v in y.tolist())
    assert seen == [0, 1, 2, 10, 11, 12, 13]


def test_concat_dataset_of_plain_datasets_and_refusals():
    class Plain(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return {"v": np.full(2, i, np.float32)}

    c = ConcatDataset([Plain(), [{"v": np.full(2, 9, np.float32)}]])
    assert next(iter(DataLoader(c, 3)))["v"].tolist() == [[0, 0], [1, 1], [9, 9]]
    for i in (3, -4):
        with pytest.raises(OutOfRangeError, match="out of range"):
            c[i]
    with pytest.raises(ArgumentTypeError, match="integer"):
        c["a"]
    with pytest.raises(ArgumentError, match="empty"):
        ConcatDataset([])
    with pytest.raises(ArgumentTypeError, match="ChainDataset"):
        ConcatDataset([Count(3)])


def test_concat_against_torch():
    td = pytest.importorskip("torch.utils.data")
    parts = [range(3), range(10, 14), range(0), range(20, 22)]
    ours, theirs = ConcatDataset(parts), td.ConcatDataset(parts)
    assert ours.cumulative_sizes == theirs.cumulative_sizes and len(ours) == len(theirs)
    assert [ours[i] for i in range(-len(ours), len(ours))] == [
        theirs[i] for i in range(-len(theirs), len(theirs))]


# ------------------------------------------------- IterableDataset, Chain, Stack

def test_iterable_dataset_chain_and_len():
    chain = Count(3) + Count(5, start=3)
    assert isinstance(chain, ChainDataset) and list(chain) == [0, 1, 2, 3, 4] and len(chain) == 5
    assert list(ChainDataset([Count(2), Count(1)])) == [0, 1, 0]

    class NoLen(IterableDataset):
        def __iter__(self):
            return iter("ab")

    assert list(NoLen()) == ["a", "b"]  # list() survives the missing length
    with pytest.raises(TypeError, match="has no length"):
        len(NoLen())
    with pytest.raises(ArgumentTypeError, match="not an IterableDataset"):
        list(ChainDataset([Count(1), _ds(2)]))


def test_stack_dataset():
    a, b = _ds(3), _ds(3, start=5)
    t = StackDataset(a, b)
    assert len(t) == 3 and t[1][1][1] == 6
    d = StackDataset(x=a, y=b)
    assert set(d[0]) == {"x", "y"}
    batch = next(iter(DataLoader(d, 3)))
    assert batch["y"][1].tolist() == [5, 6, 7]
    for args, kwargs in (((a,), {"y": b}), ((), {}), ((a, _ds(2)), {})):
        with pytest.raises(ArgumentError, match="StackDataset"):
            StackDataset(*args, **kwargs)


def test_stack_and_chain_against_torch():
    td = pytest.importorskip("torch.utils.data")
    assert len(td.StackDataset(range(3), range(3))) == len(StackDataset(range(3), range(3)))
    assert td.StackDataset(range(3), range(5, 8))[2] == StackDataset(range(3), range(5, 8))[2]

    class TorchCount(td.IterableDataset):
        def __init__(self, n):
            self.n = n

        def __iter__(self):
            return iter(range(self.n))

        def __len__(self):
            return self.n

    theirs = td.ChainDataset([TorchCount(2), TorchCount(3)])
    ours = ChainDataset([Count(2), Count(3)])
    assert list(ours) == list(theirs) and len(ours) == len(theirs)
