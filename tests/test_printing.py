"""Tensor printing is PyTorch's (tapegrad/printing.py): the same text for the same
values, dtype names aside (``dtype=float64``, not ``dtype=torch.float64``)."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tapegrad as tg

EXPECTED = [  # PyTorch 2.13's repr of the same values
    (np.float32(2.5), "tensor(2.5000)"),
    (np.float32([1, 2]), "tensor([1., 2.])"),
    (np.float32([1e-5, 1]), "tensor([1.0000e-05, 1.0000e+00])"),
    (np.float32([np.nan, np.inf, 1.5]), "tensor([   nan,    inf, 1.5000])"),
    (np.array([True, False]), "tensor([ True, False])"),
    (np.array([1, 2], np.int32), "tensor([1, 2], dtype=int32)"),
    (np.zeros((0, 3), np.float32), "tensor([], size=(0, 3))"),
    (np.float32([[1.5, 2], [3, 4]]), "tensor([[1.5000, 2.0000],\n        [3.0000, 4.0000]])"),
    (np.float32([-1.5, 100.25]), "tensor([ -1.5000, 100.2500])"),
    (np.arange(2000, dtype=np.float32), "tensor([0.0000e+00, 1.0000e+00, 2.0000e+00,  ..., "
     "1.9970e+03, 1.9980e+03,\n        1.9990e+03])"),
]


@pytest.mark.parametrize("a, text", EXPECTED)
def test_repr_is_pytorchs(a, text):
    assert repr(tg.tensor(a)) == text


def test_suffixes_and_options():
    x = tg.tensor([1.0, 2.0], requires_grad=True)
    assert repr(x) == "tensor([1., 2.], requires_grad=True)"
    assert repr(x * 2) == "tensor([2., 4.], grad_fn=<Mul>)"
    assert str(tg.tensor(np.float64(2.5))) == "tensor(2.5000, dtype=float64)"
    try:
        tg.set_printoptions(precision=2)
        assert repr(tg.tensor([1.2345])) == "tensor([1.23])"
        tg.set_printoptions(sci_mode=True)
        assert repr(tg.tensor([1.5])) == "tensor([1.50e+00])"  # precision stays, as torch's
    finally:
        tg.set_printoptions(profile="default")
    assert repr(tg.tensor([1.2345])) == "tensor([1.2345])"


_values = st.one_of(st.floats(-1e10, 1e10, width=32), st.sampled_from([0.0, 1.0, np.nan, np.inf]))


@given(a=st.one_of(
    hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=3, max_side=12),
               elements=_values),
    hnp.arrays(np.int64, hnp.array_shapes(min_dims=0, max_dims=2, max_side=40),
               elements=st.integers(-10**6, 10**6)),
    hnp.arrays(np.float64, st.just((1100,)), elements=st.floats(-5, 5))))
def test_the_same_text_as_torch(a):
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(a.copy()) if a.ndim else torch.tensor(
        a.item(), dtype=getattr(torch, a.dtype.name))
    want = repr(t).replace("torch.", "")
    # "dtype=torch.float64" is 6 characters longer: where the suffix wraps may differ
    def unwrap(text):
        return re.sub(r",\s+(dtype|size)=", r", \1=", text)

    assert unwrap(repr(tg.tensor(a))) == unwrap(want)
