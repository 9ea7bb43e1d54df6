"""tapegrad.memory_formats: PyTorch's memory-format names exist; the default ones are
what tapegrad does anyway, the channels-last ones a named error wherever PyTorch takes a
``memory_format`` (a script gets a clear refusal, not an AttributeError, and never a
tensor whose strides or is_contiguous answers differ from PyTorch's)."""

import pickle

import numpy as np
import pytest

import tapegrad as tg
from tapegrad.errors import ArgumentError, ArgumentTypeError

X = tg.tensor(np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5))
CALLS = {
    "to": lambda f: X.to(memory_format=f),
    "to(device)": lambda f: X.to("cpu", memory_format=f),
    "contiguous": lambda f: X.contiguous(memory_format=f),
    "clone": lambda f: X.clone(memory_format=f),
    "zeros_like": lambda f: tg.zeros_like(X, memory_format=f),
    "ones_like": lambda f: tg.ones_like(X, memory_format=f),
    "full_like": lambda f: tg.full_like(X, 2.0, memory_format=f),
    "rand_like": lambda f: tg.rand_like(X, memory_format=f),
    "randn_like": lambda f: tg.randn_like(X, memory_format=f),
    "Module.to": lambda f: tg.nn.Conv2d(3, 4, 3).to(memory_format=f),
}


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("fmt", [None, tg.contiguous_format, tg.preserve_format])
def test_the_default_formats_change_nothing(call, fmt):
    out = CALLS[call](fmt)
    if isinstance(out, tg.Tensor):
        assert out.shape == X.shape and out.is_contiguous()
        assert out.stride() == X.stride()
    if call in ("to", "to(device)", "contiguous", "clone"):
        np.testing.assert_array_equal(out.numpy(), X.numpy())


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("fmt", [tg.channels_last, tg.channels_last_3d])
def test_channels_last_is_a_named_error_where_pytorch_takes_a_format(call, fmt):
    with pytest.raises(ArgumentError, match=r"not supported.*remove the memory_format"):
        CALLS[call](fmt)


def test_is_contiguous_takes_the_default_format_only():
    assert X.is_contiguous(memory_format=tg.contiguous_format)
    assert not X.transpose(1, 2).is_contiguous(memory_format=tg.contiguous_format)
    with pytest.raises(ArgumentError, match="channels_last"):
        X.is_contiguous(memory_format=tg.channels_last)
    with pytest.raises(ArgumentError, match="preserve_format"):
        X.is_contiguous(memory_format=tg.preserve_format)
    with pytest.raises(ArgumentTypeError, match="'channels_last'"):
        X.is_contiguous(memory_format="channels_last")  # a string, not a format


def test_the_formats_are_named_and_pickle_as_themselves():
    assert repr(tg.channels_last) == "tapegrad.channels_last"
    assert isinstance(tg.contiguous_format, tg.memory_format)
    for fmt in (tg.contiguous_format, tg.preserve_format, tg.channels_last,
                tg.channels_last_3d):
        assert pickle.loads(pickle.dumps(fmt)) is fmt


def test_the_default_formats_against_torch():
    """Where tapegrad accepts a format, its strides are PyTorch's for that call."""
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(X.numpy().copy())
    for name in ("contiguous_format", "preserve_format"):
        ours, theirs = getattr(tg, name), getattr(torch, name)
        assert X.to(memory_format=ours).stride() == t.to(memory_format=theirs).stride()
        assert X.clone(memory_format=ours).stride() == t.clone(memory_format=theirs).stride()
    assert X.contiguous(memory_format=tg.contiguous_format).stride() == \
        t.contiguous(memory_format=torch.contiguous_format).stride()
    assert X.is_contiguous(memory_format=tg.contiguous_format) == \
        t.is_contiguous(memory_format=torch.contiguous_format)
    # the refused format: PyTorch's answer would differ from tapegrad's layout
    assert not t.to(memory_format=torch.channels_last).is_contiguous()
