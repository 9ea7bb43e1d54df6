"""DataLoader / TensorDataset / Subset."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.data import DataLoader, Dataset, Subset, TensorDataset
from tapegrad.errors import ArgumentError, ShapeError


def _ds(n=10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64)
    return TensorDataset(x, y)


def test_batches_cover_dataset_in_order():
    batches = list(DataLoader(_ds(10), batch_size=4))
    assert [b[1].tolist() for b in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    xb, yb = batches[0]
    assert isinstance(xb, tg.Tensor) and xb.shape == (4, 3) and xb.dtype == np.float32
    assert yb.dtype == np.int64
    np.testing.assert_array_equal(xb.numpy(), np.arange(12, dtype=np.float32).reshape(4, 3))


def test_len_and_drop_last():
    assert len(DataLoader(_ds(10), batch_size=4)) == 3
    dl = DataLoader(_ds(10), batch_size=4, drop_last=True)
    assert len(dl) == 2
    assert [len(b[1]) for b in dl] == [4, 4]


def test_seeded_shuffle_reproducible_and_a_permutation():
    a = [np.concatenate([b[1].numpy() for b in DataLoader(_ds(50), 8, shuffle=True, seed=3)])]
    b = [np.concatenate([b[1].numpy() for b in DataLoader(_ds(50), 8, shuffle=True, seed=3)])]
    np.testing.assert_array_equal(a[0], b[0])
    assert sorted(a[0].tolist()) == list(range(50))
    assert a[0].tolist() != list(range(50))


def test_epochs_differ_and_set_epoch_replays():
    dl = DataLoader(_ds(30), 30, shuffle=True, seed=1)
    e0 = next(iter(dl))[1].tolist()
    e1 = next(iter(dl))[1].tolist()
    assert e0 != e1
    dl2 = DataLoader(_ds(30), 30, shuffle=True, seed=1)
    dl2.set_epoch(1)
    assert next(iter(dl2))[1].tolist() == e1


def test_unseeded_shuffle_follows_manual_seed():
    tg.manual_seed(7)
    a = next(iter(DataLoader(_ds(40), 40, shuffle=True)))[1].tolist()
    tg.manual_seed(7)
    b = next(iter(DataLoader(_ds(40), 40, shuffle=True)))[1].tolist()
    assert a == b and sorted(a) == list(range(40))


def test_tensor_inputs_and_no_per_sample_access():
    class Counting(TensorDataset):
        calls = 0

        def __getitem__(self, i):
            Counting.calls += 1
            return super().__getitem__(i)

    ds = Counting(tg.tensor(np.ones((9, 2))), np.zeros(9))
    assert sum(len(b[0]) for b in DataLoader(ds, 4, shuffle=True, seed=0)) == 9
    assert Counting.calls == 0


def test_generic_dataset_is_collated():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return np.full((2,), i, np.float32), i * i

    xb, yb = next(iter(DataLoader(Squares(), batch_size=5)))
    assert xb.shape == (5, 2) and yb.tolist() == [0, 1, 4, 9, 16]


def test_subset():
    sub = Subset(_ds(10), [9, 2, 5])
    assert len(sub) == 3
    assert sub[0][1] == 9
    (xb, yb), = list(DataLoader(sub, batch_size=3))
    assert yb.tolist() == [9, 2, 5]
    with pytest.raises(ArgumentError, match="indices"):
        Subset(_ds(10), [10])


def test_errors():
    with pytest.raises(ShapeError, match="same number of samples"):
        TensorDataset(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ArgumentError, match="at least one"):
        TensorDataset()
    with pytest.raises(ArgumentError, match="batch_size"):
        DataLoader(_ds(), batch_size=0)


def test_pytorchs_worker_options_are_accepted_and_change_nothing():
    ds = TensorDataset(np.arange(10.0), np.arange(10))
    plain = [x.tolist() for x, _ in DataLoader(ds, 4, shuffle=True, seed=1)]
    torchy = DataLoader(ds, 4, shuffle=True, seed=1, num_workers=2, pin_memory=True,
                        persistent_workers=True)
    assert [x.tolist() for x, _ in torchy] == plain
    with pytest.raises(ArgumentError, match="num_workers"):
        DataLoader(ds, 4, num_workers=-1)


def test_batches_keep_the_samples_structure_as_pytorchs_collate():
    class Plain(Dataset):  # one array per sample
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return np.full((2,), i, np.float32)

    class Named(Plain):
        def __getitem__(self, i):
            return {"x": np.full((2,), i, np.float32), "y": i}

    xb = next(iter(DataLoader(Plain(), batch_size=4)))
    assert isinstance(xb, tg.Tensor) and xb.shape == (4, 2)
    d = next(iter(DataLoader(Named(), batch_size=4)))
    assert set(d) == {"x", "y"} and d["y"].tolist() == [0, 1, 2, 3] and d["x"].shape == (4, 2)
    (only,) = next(iter(DataLoader(TensorDataset(np.arange(3.0)), batch_size=3)))
    assert only.tolist() == [0, 1, 2]  # a TensorDataset sample is a tuple, as in PyTorch
