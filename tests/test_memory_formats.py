"""tapegrad.memory_formats: PyTorch's memory formats, channels_last included. A
channels-last tensor is a logical (N, C, H, W) tensor with NHWC strides; contiguous, to,
clone, is_contiguous, the ``*_like`` factories and Module.to take the formats with
PyTorch's rules, a leaf's ``.grad`` takes the leaf's layout and elementwise ops keep
their input's. Every expected stride below is PyTorch's (torch 2.13), written out."""

import pickle

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad.errors import ArgumentError, ArgumentTypeError, ShapeError

CL, CL3, CF, PF = tg.channels_last, tg.channels_last_3d, tg.contiguous_format, tg.preserve_format
X = tg.tensor(np.arange(120, dtype=np.float32).reshape(2, 3, 4, 5))
NCHW, NHWC = (60, 20, 5, 1), (60, 1, 15, 3)  # (2, 3, 4, 5)'s strides in the two formats


def channels_last(x=X):
    return x.contiguous(memory_format=CL)


CALLS = {
    "to": lambda x, f: x.to(memory_format=f),
    "to(device, dtype)": lambda x, f: x.to("cpu", tg.float64, memory_format=f),
    "contiguous": lambda x, f: x.contiguous(memory_format=f),
    "clone": lambda x, f: x.clone(memory_format=f),
    "zeros_like": lambda x, f: tg.zeros_like(x, memory_format=f),
    "ones_like": lambda x, f: tg.ones_like(x, memory_format=f),
    "full_like": lambda x, f: tg.full_like(x, 2.0, memory_format=f),
    "rand_like": lambda x, f: tg.rand_like(x, memory_format=f),
    "randn_like": lambda x, f: tg.randn_like(x, memory_format=f),
}


def _check_values(call, out, x):
    want = {"zeros_like": 0.0, "ones_like": 1.0, "full_like": 2.0}.get(call, X.numpy())
    if call == "rand_like":
        assert ((out.numpy() >= 0) & (out.numpy() < 1)).all()
    elif call == "randn_like":
        assert np.isfinite(out.numpy()).all() and out.numpy().std() > 0.1
    else:
        np.testing.assert_array_equal(out.numpy(), np.broadcast_to(want, x.shape))


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("fmt", [None, CF, PF, CL])
def test_each_call_lays_out_as_pytorch(call, layout, fmt):
    x = X if layout == "NCHW" else channels_last()
    if call == "contiguous" and fmt is PF:
        with pytest.raises(ArgumentError, match="preserve_format"):
            CALLS[call](x, fmt)
        return
    out = CALLS[call](x, fmt)
    # None is preserve_format, except for contiguous (contiguous_format)
    kept = fmt is PF or (fmt is None and call != "contiguous")
    want = NHWC if fmt is CL or (kept and layout == "NHWC") else NCHW
    assert out.shape == x.shape and out.stride() == want
    assert out.is_contiguous(memory_format=CL) == (want == NHWC)
    assert out.is_contiguous() == (want == NCHW)
    _check_values(call, out, x)
    # to/contiguous return x itself when nothing changes; clone and the factories never
    same = call in ("to", "contiguous") and want == x.stride()
    assert (out is x) == same


def test_a_channels_last_tensor_is_a_transposed_nhwc_array():
    y = channels_last()
    assert y.stride() == NHWC and y.shape == (2, 3, 4, 5)
    assert y.array.transpose(0, 2, 3, 1).flags.c_contiguous
    np.testing.assert_array_equal(y.numpy(), X.numpy())
    assert y.is_contiguous(memory_format=CL) and not y.is_contiguous()
    assert y.contiguous(memory_format=CL) is y and y.contiguous().stride() == NCHW


def test_channels_last_3d_is_ndhwc():
    x = tg.tensor(np.arange(240, dtype=np.float32).reshape(2, 3, 2, 4, 5))
    y = x.contiguous(memory_format=CL3)
    assert y.stride() == (120, 1, 60, 15, 3) and y.is_contiguous(memory_format=CL3)
    assert not y.is_contiguous(memory_format=CL) and not y.is_contiguous()
    assert y.clone().stride() == (120, 1, 60, 15, 3)
    np.testing.assert_array_equal(y.numpy(), x.numpy())


@pytest.mark.parametrize("call", list(CALLS))
@pytest.mark.parametrize("x, fmt", [(X[0], CL), (X, CL3)], ids=["3-D channels_last",
                                                                 "4-D channels_last_3d"])
def test_a_format_of_the_wrong_rank_is_a_shape_error(call, x, fmt):
    with pytest.raises(ShapeError, match=r"needs a \d-D tensor .* got a \d-D one"):
        CALLS[call](x, fmt)
    assert not x.is_contiguous(memory_format=fmt)  # a question, not an error (PyTorch too)


def test_what_is_not_a_format_is_refused():
    for call in ("to", "contiguous", "clone", "zeros_like"):
        with pytest.raises(ArgumentTypeError, match="'channels_last'"):
            CALLS[call](X, "channels_last")  # a string, not a format
    with pytest.raises(ArgumentError, match="preserve_format"):
        X.is_contiguous(memory_format=PF)
    with pytest.raises(ArgumentTypeError):
        tg.nn.Conv2d(3, 4, 3).to(memory_format="channels_last")


def test_the_formats_are_named_and_pickle_as_themselves():
    assert repr(CL) == "tapegrad.channels_last"
    assert isinstance(CF, tg.memory_format)
    for fmt in (CF, PF, CL, CL3):
        assert pickle.loads(pickle.dumps(fmt)) is fmt


A = tg.tensor(np.arange(24, dtype=np.float32).reshape(4, 6))
# (input, its strides, clone's and zeros_like's strides): preserve_format keeps a dense
# input's strides, and a strided one's order of axes (PyTorch's infer_dense_strides)
PRESERVED = {
    "transposed 2-D": (lambda: A.t(), (1, 6), (1, 6)),
    "permuted 4-D": (lambda: X.transpose(1, 3), (60, 1, 5, 20), (60, 1, 5, 20)),
    "strided NCHW": (lambda: X[..., ::2], (60, 20, 5, 2), (36, 12, 3, 1)),
    "strided NHWC": (lambda: channels_last()[..., ::2], (60, 1, 15, 6), (36, 1, 9, 3)),
    "strided transposed": (lambda: A.t()[::2], (2, 6), (1, 3)),
    "flipped NHWC": (lambda: channels_last().flip(3), NHWC, NHWC),
}


@pytest.mark.parametrize("case", list(PRESERVED))
def test_preserve_format_keeps_the_order_of_axes(case):
    make, strides, want = PRESERVED[case]
    x = make()
    assert x.stride() == strides
    for out in (x.clone(), tg.zeros_like(x), tg.rand_like(x), x.to(tg.float64)):
        assert out.stride() == want
    np.testing.assert_array_equal(x.clone().numpy(), x.numpy())


def test_to_returns_x_where_its_suggested_format_is_the_one_asked():
    """PyTorch's to() aliases on suggest_memory_format(), not on is_contiguous: a
    strided NHWC tensor stays itself, contiguous() copies it."""
    x = channels_last(tg.zeros(2, 3, 4, 10))[..., ::2]
    assert x.stride() == (120, 1, 30, 6) and not x.is_contiguous(memory_format=CL)
    assert x.to(memory_format=CL) is x
    assert x.contiguous(memory_format=CL).stride() == NHWC
    t = A.t()  # suggests contiguous_format (2-D)
    assert t.to(memory_format=CF) is t and t.contiguous() is not t


def test_view_refuses_reshape_and_flatten_copy_to_c_order():
    y = channels_last()
    with pytest.raises(ShapeError, match="view"):
        y.view(2, -1)
    for out in (y.reshape(2, -1), y.flatten(1)):
        assert out.stride() == (60, 1) and out.is_contiguous()
        np.testing.assert_array_equal(out.numpy(), X.numpy().reshape(2, -1))
    assert y.view(2, 3, 4, 5).stride() == NHWC


@pytest.mark.parametrize("convert", [
    lambda x: x.contiguous(memory_format=CL), lambda x: x.clone(memory_format=CL),
    lambda x: x.to(memory_format=CL), lambda x: x.to(tg.float64, memory_format=CL)])
def test_the_gradient_flows_back_through_a_layout_change(convert):
    x = tg.tensor(X.numpy(), requires_grad=True)
    y = convert(x)
    assert y.stride() == NHWC and y.requires_grad
    k = np.linspace(-1, 1, 120).reshape(2, 3, 4, 5)
    (y * tg.tensor(k, dtype=y.dtype)).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), k, rtol=1e-6)
    assert x.grad.stride() == NCHW and x.grad.dtype == x.dtype


def _model():
    return tg.nn.Sequential(tg.nn.Conv2d(3, 4, 3), tg.nn.BatchNorm2d(4), tg.nn.Flatten(),
                            tg.nn.Linear(4, 2))


def test_module_to_channels_last_relays_out_the_4d_weights_in_place():
    m = _model()
    inp = tg.tensor(np.random.default_rng(0).standard_normal((2, 3, 3, 3)), dtype=tg.float32)
    m(inp).sum().backward()
    before = m(inp).numpy()
    tensors = dict(m.named_parameters()) | dict(m.named_buffers())
    arrays = {k: t.array for k, t in tensors.items()}
    version = m[0].weight._version[0]
    assert m.to(memory_format=CL) is m
    assert dict(m.named_parameters()) | dict(m.named_buffers()) == tensors  # same objects
    w = m[0].weight
    assert w.stride() == (27, 1, 9, 3) and w.grad.stride() == (27, 1, 9, 3)
    assert w._version[0] > version
    np.testing.assert_array_equal(w.numpy(), arrays["0.weight"])
    for k, t in tensors.items():
        assert (t.array is arrays[k]) == (k != "0.weight"), k
    # the conv now runs channels-last (oneDNN's NHWC kernels sum in another order):
    # float32 rounding of sums of 27 products of order one
    np.testing.assert_allclose(m(inp).numpy(), before, rtol=1e-5, atol=1e-6)
    m.to(memory_format=CF)
    assert w.stride() == (27, 9, 3, 1) and w.grad.stride() == (27, 9, 3, 1)


def test_module_to_channels_last_3d_and_the_wrong_rank():
    class Net(tg.nn.Module):
        def __init__(self):
            super().__init__()
            self.w5 = tg.nn.Parameter(tg.zeros(4, 3, 3, 3, 3))
            self.w2 = tg.nn.Parameter(tg.zeros(4, 3))

    net = Net()
    assert net.to(memory_format=CL3).w5.stride() == (81, 1, 27, 9, 3)
    assert net.w2.stride() == (3, 1)
    m = _model()
    with pytest.raises(ShapeError, match=r"Module.to .*\(4, 3, 3, 3\).*needs a 5-D"):
        m.to(memory_format=CL3)  # PyTorch refuses a 4-D weight too
    with pytest.raises(ShapeError, match="needs a 4-D"):
        net.to(memory_format=CL)
    assert m[0].weight.stride() == (27, 9, 3, 1) and net.w5.stride() == (81, 1, 27, 9, 3)


# (leaf, a view of it, the layout of the gradient reaching the view, the leaf grad's strides)
LEAVES = {
    "NHWC leaf, NCHW gradient": (channels_last, lambda w: w, lambda t: t.contiguous(), NHWC),
    "NCHW leaf, NHWC gradient": (lambda: X, lambda w: w, channels_last, NCHW),
    "C leaf, transposed gradient": (lambda: A, lambda w: w.t(), lambda t: t.contiguous(),
                                    (6, 1)),
    "transposed leaf, C gradient": (lambda: A.t(), lambda w: w, lambda t: t.contiguous(),
                                    (1, 6)),
    "strided leaf: C order": (lambda: A[:, ::2], lambda w: w,
                              lambda t: t.t().contiguous().t(), (3, 1)),
}


@pytest.mark.parametrize("case", list(LEAVES))
def test_a_leaf_gradient_takes_the_leaf_layout(case):
    """PyTorch's AccumulateGrad layout contract: a dense leaf's .grad has its strides,
    another leaf's is C-ordered; a second backward adds in place, layout kept."""
    make, view, layout, want = LEAVES[case]
    w = make().detach().requires_grad_()
    k = np.arange(w.numel(), dtype=np.float32).reshape(w.shape)
    other = layout(view(tg.tensor(k)))  # d loss / d view(w): other, in its layout
    (view(w) * other).sum().backward()
    first = w.grad.array
    (view(w) * other).sum().backward()
    assert w.grad.array is first and w.grad.stride() == want
    np.testing.assert_array_equal(w.grad.numpy(), 2 * k)


def test_a_c_leaf_gradient_is_one_copy_as_before(monkeypatch):
    from tapegrad import engine

    copies = []
    real = engine.pool.copy
    monkeypatch.setattr(engine.pool, "copy", lambda g: copies.append(g) or real(g))
    x = tg.tensor(X.numpy(), requires_grad=True)
    (x * 2).sum().backward()
    assert len(copies) == 1 and x.grad.stride() == NCHW


def _torch_gelu(x):  # erf GELU, in float64
    from math import erf
    return x * 0.5 * (1 + np.vectorize(erf)(x / np.sqrt(2)))


ELEMENTWISE = {
    "relu": tg.ops.relu,
    "relu_": lambda x: (x * 1).relu_(),
    "ReLU(inplace=True)": tg.nn.ReLU(inplace=True),
    "leaky_relu": lambda x: F.leaky_relu(x, 0.1),
    "sigmoid": lambda x: x.sigmoid(),
    "tanh": lambda x: x.tanh(),
    "gelu": F.gelu,
    "gelu tanh": lambda x: F.gelu(x, approximate="tanh"),
    "x + y": lambda x: x + x.detach() * 0.5,
    "x * 2": lambda x: x * 2,
    "neg": lambda x: x.neg(),
    "exp": lambda x: x.exp(),
    "clamp": lambda x: x.clamp(-0.5, 0.5),
    "dropout": lambda x: F.dropout(x, 0.5, training=True),
}


@pytest.mark.parametrize("op", list(ELEMENTWISE))
def test_elementwise_ops_keep_channels_last(op):
    f = ELEMENTWISE[op]
    values = np.random.default_rng(1).standard_normal((2, 3, 4, 5)).astype(np.float32)
    x = tg.tensor(values).contiguous(memory_format=CL).requires_grad_()
    ref = tg.tensor(values, requires_grad=True)
    tg.manual_seed(0)
    out = f(x)
    (gx,) = tg.autograd.grad(out, x, tg.ones_like(out))
    tg.manual_seed(0)
    ref_out = f(ref)
    (gref,) = tg.autograd.grad(ref_out, ref, tg.ones_like(ref_out))
    assert out.stride() == NHWC and gx.stride() == NHWC
    if op == "dropout":  # the mask is drawn in memory order: check against itself
        kept = out.numpy() != 0
        np.testing.assert_allclose(out.numpy()[kept], 2 * values[kept], rtol=1e-6)
        np.testing.assert_array_equal(gx.numpy(), np.where(kept, 2.0, 0.0))
        return
    np.testing.assert_allclose(out.numpy(), ref_out.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(gx.numpy(), gref.numpy(), rtol=1e-6, atol=1e-7)
    if op == "gelu":
        np.testing.assert_allclose(out.numpy(), _torch_gelu(values.astype(np.float64)),
                                   rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ against torch
def _inputs(torch):
    """(tapegrad tensor, the same torch tensor) in the layouts PyTorch distinguishes."""
    a, x = A.numpy(), X.numpy()
    t_a, t_x = torch.from_numpy(a.copy()), torch.from_numpy(x.copy())
    cl = lambda t: t.contiguous(memory_format=torch.channels_last)  # noqa: E731
    return {
        "NCHW": (X, t_x), "NHWC": (channels_last(), cl(t_x)),
        "permuted": (X.transpose(1, 3), t_x.transpose(1, 3)),
        "strided NCHW": (X[..., ::2], t_x[..., ::2]),
        "strided NHWC": (channels_last()[..., ::2], cl(t_x)[..., ::2]),
        "NHWC C=1": (channels_last(X[:, :1]), cl(t_x[:, :1])),
        "strided NHWC, suggests NHWC": (channels_last(X.repeat(1, 1, 1, 2))[..., ::2],
                                        cl(t_x.repeat(1, 1, 1, 2))[..., ::2]),
        "expanded": (X[:1].expand(3, 3, 4, 5), t_x[:1].expand(3, 3, 4, 5)),
        "2-D": (A, t_a), "transposed": (A.t(), t_a.t()), "strided transposed":
        (A.t()[::2], t_a.t()[::2]),
    }


def test_strides_and_answers_against_torch():
    torch = pytest.importorskip("torch")
    ours = {"contiguous_format": CF, "preserve_format": PF, "channels_last": CL}
    for name, (x, t) in _inputs(torch).items():
        assert x.stride() == t.stride(), name
        for fname, fmt in ours.items():
            theirs = getattr(torch, fname)
            if fname != "preserve_format":
                assert x.is_contiguous(memory_format=fmt) == t.is_contiguous(
                    memory_format=theirs), (name, fname)
            if fname == "channels_last" and x.ndim != 4:
                continue
            pairs = [(x.to(memory_format=fmt), t.to(memory_format=theirs)),
                     (x.to(tg.float64, memory_format=fmt), t.to(torch.float64,
                                                               memory_format=theirs)),
                     (x.clone(memory_format=fmt), t.clone(memory_format=theirs))]
            pairs += [(getattr(tg, f)(x, memory_format=fmt),
                       getattr(torch, f)(t, memory_format=theirs))
                      for f in ("zeros_like", "ones_like", "rand_like", "randn_like")]
            if fname != "preserve_format":
                pairs.append((x.contiguous(memory_format=fmt),
                              t.contiguous(memory_format=theirs)))
            for i, (o, p) in enumerate(pairs):
                assert o.stride() == p.stride(), (name, fname, i)
            assert (x.to(memory_format=fmt) is x) == (t.to(memory_format=theirs) is t)


def test_module_to_against_torch():
    torch = pytest.importorskip("torch")
    m = _model().to(memory_format=CL)
    tm = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4),
                             torch.nn.Flatten(), torch.nn.Linear(4, 2))
    tm.to(memory_format=torch.channels_last)
    theirs = dict(tm.named_parameters()) | dict(tm.named_buffers())
    for k, t in (dict(m.named_parameters()) | dict(m.named_buffers())).items():
        assert t.stride() == theirs[k].stride(), k
