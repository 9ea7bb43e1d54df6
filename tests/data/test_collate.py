"""default_collate / default_convert (collate.py), against torch's where installed."""

import collections
from collections import namedtuple

import numpy as np
import pytest
from batch_structure import sig, values

import tapegrad as tg
from tapegrad.data import default_collate, default_convert
from tapegrad.errors import ArgumentError, ArgumentTypeError, ShapeError

Point = namedtuple("Point", "x y")


# each case: a function of the tensor constructor (tapegrad.tensor or torch.tensor)
CASES = {
    "ints": lambda t: [1, 2, 3],
    "floats": lambda t: [1.0, 2.5],
    "bools": lambda t: [True, False],
    "ints then a float": lambda t: [1, 2.5],
    "numpy float32 scalars": lambda t: [np.float32(1), np.float32(2)],
    "numpy int32 scalars": lambda t: [np.int32(1), np.int32(5)],
    "numpy bool scalars": lambda t: [np.bool_(True), np.bool_(False)],
    "0-d arrays": lambda t: [np.array(1.0, np.float32), np.array(2.0, np.float32)],
    "uint8 arrays": lambda t: [np.zeros((2, 3), np.uint8), np.ones((2, 3), np.uint8)],
    "tensors": lambda t: [t([[1.0, 2.0]]), t([[3.0, 4.0]])],
    "0-d tensors": lambda t: [t(1.0), t(0.0)],
    "strings": lambda t: ["a", "bc"],
    "tuples": lambda t: [(np.zeros(2, np.float32), 1, "a"), (np.ones(2, np.float32), 2, "b")],
    "lists": lambda t: [[1, 2.0], [3, 4.0]],
    "dicts": lambda t: [{"img": np.zeros(3), "label": 0}, {"img": np.ones(3), "label": 1}],
    "nested": lambda t: [{"a": (1, [2.0, t(3.0)]), "b": {"c": "x"}},
                         {"a": (4, [5.0, t(6.0)]), "b": {"c": "y"}}],
    "namedtuples": lambda t: [Point(1, np.zeros(2)), Point(2, np.ones(2))],
    "siamese triplets": lambda t: [(np.zeros((1, 4, 4), np.float32),) * 2 + (t(1.0),)] * 3,
}


@pytest.mark.parametrize("name", list(CASES))
def test_default_collate_matches_torch(name):
    torch = pytest.importorskip("torch")
    from torch.utils.data import default_collate as torch_collate

    ours = default_collate(CASES[name](tg.tensor))
    theirs = torch_collate(CASES[name](torch.tensor))
    assert sig(ours) == sig(theirs)
    assert values(ours) == values(theirs)


@pytest.mark.parametrize("sample", [(np.zeros(2), 1, "s"), {"a": np.int32(3), "b": [np.ones(2)]},
                                    Point(np.zeros(1), 2.0), 7, "text", [np.zeros(2)]])
def test_default_convert_matches_torch(sample):
    pytest.importorskip("torch")
    from torch.utils.data import default_convert as torch_convert

    assert sig(default_convert(sample)) == sig(torch_convert(sample))


def test_structure_kept_by_type():
    x, y = default_collate([(np.zeros(2, np.float32), 1)] * 3)
    batch = default_collate([(np.zeros(2, np.float32), 1)] * 3)
    assert isinstance(batch, tuple)  # a tuple stays a tuple here (PyTorch: a list)
    assert isinstance(default_collate([[1, 2]] * 2), list)
    p = default_collate([Point(1, 2.0)] * 2)
    assert isinstance(p, Point) and p.x.dtype == np.int64 and p.y.dtype == np.float64
    od = default_collate([collections.OrderedDict(b=1, a=2)] * 2)
    assert isinstance(od, collections.OrderedDict) and list(od) == ["b", "a"]
    assert x.shape == (3, 2) and y.tolist() == [1, 1, 1]


def test_dtypes_as_pytorch():
    assert default_collate([1, 2]).dtype == np.int64
    assert default_collate([1.0, 2.0]).dtype == np.float64
    assert default_collate([True, False]).dtype == np.bool_
    assert default_collate([1, 2.5]).dtype == np.float32  # the default float dtype
    assert default_collate([np.float16(1)]).dtype == np.float16


def test_refusals():
    with pytest.raises(ArgumentTypeError, match="default_collate: a batch must hold"):
        default_collate([None, None])
    with pytest.raises(ArgumentTypeError, match="NoneType"):
        default_collate([(1, None)])
    with pytest.raises(ArgumentTypeError, match="<U1"):
        default_collate([np.array(["a"])])
    with pytest.raises(ShapeError, match="as many fields; sample 0 has 1, sample 1 has 2"):
        default_collate([(1,), (1, 2)])
    with pytest.raises(ShapeError, match=r"sample 0 has \(2,\), sample 1 has \(3,\)"):
        default_collate([np.zeros(2), np.zeros(3)])
    with pytest.raises(ArgumentError, match="empty batch"):
        default_collate([])


def test_refusals_match_torch_kinds():
    pytest.importorskip("torch")
    from torch.utils.data import default_collate as torch_collate

    for batch in ([None], [object()], [np.array(["a"])]):
        with pytest.raises(TypeError):
            torch_collate(batch)
        with pytest.raises(TypeError):
            default_collate(batch)


def test_dataloader_module_alias():
    from tapegrad.data import dataloader
    from tapegrad.utils import data as utils_data

    assert dataloader.default_collate is default_collate
    assert utils_data.default_collate is default_collate
    assert utils_data.random_split is tg.data.random_split
