"""nn.GELU, SiLU, ELU, Softplus, PReLU, LayerNorm and GroupNorm: forward equals
the op, parameters and state_dict, repr, the F functions, and torch.nn with
copied weights when torch is installed."""

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, ops
from tapegrad.errors import ArgumentError, ShapeError


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# layer, the op it must equal, an input shape
LAYERS = [
    (lambda: nn.GELU(), lambda x, m: ops.gelu(x), (2, 3, 4)),
    (lambda: nn.GELU("tanh"), lambda x, m: ops.gelu(x, approximate="tanh"), (2, 3, 4)),
    (lambda: nn.SiLU(), lambda x, m: ops.silu(x), (2, 5)),
    (lambda: nn.ELU(0.7), lambda x, m: ops.elu(x, 0.7), (2, 5)),
    (lambda: nn.Softplus(2.0, 1.0), lambda x, m: ops.softplus(x, 2.0, 1.0), (2, 5)),
    (lambda: nn.PReLU(), lambda x, m: ops.prelu(x, m.weight), (2, 3, 4)),
    (lambda: nn.PReLU(3, 0.1), lambda x, m: ops.prelu(x, m.weight), (2, 3, 4)),
    (lambda: nn.LayerNorm(4), lambda x, m: ops.layer_norm(x, 4, m.weight, m.bias), (2, 3, 4)),
    (lambda: nn.LayerNorm((3, 4), eps=1e-3, bias=False),
     lambda x, m: ops.layer_norm(x, (3, 4), m.weight, None, 1e-3), (2, 3, 4)),
    (lambda: nn.LayerNorm([4], elementwise_affine=False),
     lambda x, m: ops.layer_norm(x, 4, eps=1e-5), (2, 3, 4)),
    (lambda: nn.GroupNorm(2, 6), lambda x, m: ops.group_norm(x, 2, m.weight, m.bias),
     (2, 6, 3, 2)),
    (lambda: nn.GroupNorm(3, 6, eps=1e-2, affine=False),
     lambda x, m: ops.group_norm(x, 3, eps=1e-2), (2, 6, 3)),
]
IDS = ["gelu", "gelu-tanh", "silu", "elu", "softplus", "prelu", "prelu3", "layernorm",
       "layernorm-nobias", "layernorm-noaffine", "groupnorm", "groupnorm-noaffine"]


def _randomise(m, seed=1):
    """Non-trivial parameters, so that copying them to torch is tested."""
    rng = np.random.default_rng(seed)
    for p in m.parameters():
        p.array[...] = rng.uniform(0.5, 1.5, p.shape).astype(p.dtype)
    return m


@pytest.mark.parametrize("make, op, shape", LAYERS, ids=IDS)
def test_forward_equals_the_op_and_gradients_reach_the_parameters(make, op, shape):
    m = _randomise(make())
    x = tg.tensor(_x(*shape), requires_grad=True)
    y = m(x)
    np.testing.assert_array_equal(y.numpy(), op(x, m).numpy())
    assert y.dtype == np.float32
    y.sum().backward()
    assert x.grad is not None
    for name, p in m.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name


@pytest.mark.parametrize("make, op, shape", LAYERS, ids=IDS)
def test_state_dict_round_trip(make, op, shape):
    a, b = _randomise(make(), 1), _randomise(make(), 2)
    b.load_state_dict(a.state_dict())
    x = tg.tensor(_x(*shape))
    np.testing.assert_array_equal(a(x).numpy(), b(x).numpy())
    assert list(a.state_dict()) == [n for n, _ in a.named_parameters()]


def test_parameters_and_their_initial_values():
    p = nn.PReLU(3, init=0.1)
    assert [n for n, _ in p.named_parameters()] == ["weight"]
    np.testing.assert_array_equal(p.weight.numpy(), np.full(3, 0.1, np.float32))
    assert p.weight.requires_grad and nn.PReLU().weight.shape == (1,)
    ln = nn.LayerNorm((3, 4))
    assert list(ln.state_dict()) == ["weight", "bias"]
    assert ln.weight.shape == ln.bias.shape == (3, 4) and ln.normalized_shape == (3, 4)
    np.testing.assert_array_equal(ln.weight.numpy(), 1)
    np.testing.assert_array_equal(ln.bias.numpy(), 0)
    assert nn.LayerNorm(5).normalized_shape == (5,)
    no_bias = nn.LayerNorm(4, bias=False)
    assert no_bias.bias is None and list(no_bias.state_dict()) == ["weight"]
    assert list(nn.LayerNorm(4, elementwise_affine=False).parameters()) == []
    gn = nn.GroupNorm(2, 6)
    assert list(gn.state_dict()) == ["weight", "bias"] and gn.weight.shape == (6,)
    np.testing.assert_array_equal(gn.weight.numpy(), 1)
    np.testing.assert_array_equal(gn.bias.numpy(), 0)
    assert gn.weight.dtype == np.float32
    assert nn.GroupNorm(2, 6, dtype=np.float64).weight.dtype == np.float64
    assert nn.GroupNorm(2, 6, affine=False).weight is None
    assert nn.GroupNorm(2, 6, bias=False).bias is None
    # reset_parameters restores PyTorch's initial values
    _randomise(gn).reset_parameters()
    np.testing.assert_array_equal(gn.weight.numpy(), 1)


def test_reprs_are_pytorchs():
    assert repr(nn.GELU()) == "GELU(approximate='none')"
    assert repr(nn.GELU(approximate="tanh")) == "GELU(approximate='tanh')"
    assert repr(nn.SiLU()) == "SiLU()"
    assert repr(nn.ELU()) == "ELU(alpha=1.0)"
    assert repr(nn.Softplus(2, 10)) == "Softplus(beta=2, threshold=10)"
    assert repr(nn.PReLU(3)) == "PReLU(num_parameters=3)"
    assert repr(nn.LayerNorm(4)) == ("LayerNorm((4,), eps=1e-05, elementwise_affine=True, "
                                     "bias=True)")
    assert repr(nn.LayerNorm((3, 4), eps=1e-3, elementwise_affine=False)) == (
        "LayerNorm((3, 4), eps=0.001, elementwise_affine=False, bias=False)")
    assert repr(nn.GroupNorm(2, 4)) == "GroupNorm(2, 4, eps=1e-05, affine=True, bias=True)"
    assert repr(nn.GroupNorm(2, 4, affine=False)) == (
        "GroupNorm(2, 4, eps=1e-05, affine=False, bias=False)")


def test_reprs_match_torch():
    torch = pytest.importorskip("torch")
    pairs = [(nn.GELU("tanh"), torch.nn.GELU("tanh")), (nn.SiLU(), torch.nn.SiLU()),
             (nn.ELU(0.5), torch.nn.ELU(0.5)), (nn.Softplus(), torch.nn.Softplus()),
             (nn.PReLU(3), torch.nn.PReLU(3)), (nn.LayerNorm((2, 3)), torch.nn.LayerNorm((2, 3))),
             (nn.LayerNorm(3, bias=False), torch.nn.LayerNorm(3, bias=False)),
             (nn.GroupNorm(3, 6, affine=False), torch.nn.GroupNorm(3, 6, affine=False))]
    for ours, theirs in pairs:
        assert repr(ours) == repr(theirs)


def test_layer_errors():
    with pytest.raises(ArgumentError, match="GELU: approximate must be 'none' or 'tanh'"):
        nn.GELU("fast")
    with pytest.raises(ArgumentError, match="PReLU: num_parameters must be a positive int"):
        nn.PReLU(0)
    with pytest.raises(ArgumentError, match="LayerNorm: normalized_shape must be an int"):
        nn.LayerNorm(())
    with pytest.raises(ArgumentError, match="GroupNorm: num_channels=6 must be divisible by "
                                            "num_groups=4"):
        nn.GroupNorm(4, 6)
    with pytest.raises(ArgumentError, match="GroupNorm: num_groups must be a positive int"):
        nn.GroupNorm(0, 6)
    with pytest.raises(ShapeError, match=r"GroupNorm\(2, 6\): expected input of shape "
                                         r"\(N, 6, \*\), got \(2, 4, 3\)"):
        nn.GroupNorm(2, 6, affine=False)(tg.tensor(_x(2, 4, 3)))
    with pytest.raises(ShapeError, match="prelu: weight"):
        nn.PReLU(3)(tg.tensor(_x(2, 4)))
    with pytest.raises(ShapeError, match="layer_norm: normalized_shape"):
        nn.LayerNorm(5)(tg.tensor(_x(2, 4)))


def test_functional_names():
    x = tg.tensor(_x(2, 3, 4))
    w = tg.tensor(np.full(3, 0.2, np.float32))
    for ours, op in ((F.gelu(x), ops.gelu(x)), (F.silu(x, inplace=False), ops.silu(x)),
                     (F.elu(x, 0.5), ops.elu(x, 0.5)), (F.softplus(x, 2.0), ops.softplus(x, 2.0)),
                     (F.prelu(x, w), ops.prelu(x, w)),
                     (F.layer_norm(x, (4,), eps=1e-3), ops.layer_norm(x, 4, eps=1e-3)),
                     (F.group_norm(x, 3), ops.group_norm(x, 3)),
                     (F.gelu(input=x, approximate="tanh"), ops.gelu(x, "tanh")),
                     (F.elu(input=x, alpha=2.0, inplace=True), ops.elu(x, 2.0))):
        np.testing.assert_array_equal(ours.numpy(), op.numpy())


# ------------------------------------------------------------------ torch


def _torch_layers(torch):
    return [
        (nn.GELU(), torch.nn.GELU(), (2, 3, 4)),
        (nn.GELU("tanh"), torch.nn.GELU("tanh"), (2, 3, 4)),
        (nn.SiLU(), torch.nn.SiLU(), (3, 5)),
        (nn.ELU(0.6), torch.nn.ELU(0.6), (3, 5)),
        (nn.Softplus(1.5, 2.0), torch.nn.Softplus(1.5, 2.0), (3, 5)),
        (nn.PReLU(), torch.nn.PReLU(), (2, 3, 4)),
        (nn.PReLU(3, 0.1), torch.nn.PReLU(3, 0.1), (2, 3, 4)),
        (nn.LayerNorm((3, 4)), torch.nn.LayerNorm((3, 4)), (2, 3, 4)),
        (nn.LayerNorm(4, bias=False), torch.nn.LayerNorm(4, bias=False), (2, 3, 4)),
        (nn.LayerNorm(4, elementwise_affine=False), torch.nn.LayerNorm(
            4, elementwise_affine=False), (2, 3, 4)),
        (nn.GroupNorm(2, 6), torch.nn.GroupNorm(2, 6), (2, 6, 3, 2)),
        (nn.GroupNorm(3, 6, affine=False), torch.nn.GroupNorm(3, 6, affine=False), (2, 6, 5)),
    ]


def test_layers_match_torch_nn_with_copied_weights():
    torch = pytest.importorskip("torch")
    for k, (ours, theirs, shape) in enumerate(_torch_layers(torch)):
        _randomise(ours, k)
        theirs.load_state_dict({n: torch.from_numpy(v.numpy().copy())
                                for n, v in ours.state_dict().items()}, strict=True)
        x = _x(*shape, seed=k) * 2
        xt, xr = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        y, yr = ours(xt), theirs(xr)
        np.testing.assert_allclose(y.numpy(), yr.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=repr(ours))
        g = _x(*shape, seed=100 + k)
        y.backward(tg.tensor(g))
        yr.backward(torch.from_numpy(g))
        np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-4, atol=1e-5,
                                   err_msg=repr(ours))
        theirs_params = dict(theirs.named_parameters())
        assert sorted(theirs_params) == sorted(n for n, _ in ours.named_parameters())
        for name, p in ours.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), theirs_params[name].grad.numpy(),
                                       rtol=1e-4, atol=1e-5, err_msg=f"{ours!r} {name}")


def test_torch_state_dicts_load_into_ours():
    torch = pytest.importorskip("torch")
    for ours, theirs, _ in _torch_layers(torch):
        for p in theirs.parameters():
            p.data.uniform_(-1, 1)
        ours.load_state_dict({n: tg.tensor(v.numpy()) for n, v in theirs.state_dict().items()})
        for n, v in theirs.state_dict().items():
            np.testing.assert_array_equal(ours.state_dict()[n].numpy(), v.numpy())


# ------------- ReLU6, Hardtanh, Hardsigmoid, Hardswish, SELU, Mish, LogSigmoid, ...

MORE_LAYERS = [
    (lambda: nn.ReLU6(), ops.relu6), (lambda: nn.ReLU6(inplace=True), ops.relu6),
    (lambda: nn.Hardtanh(), ops.hardtanh),
    (lambda: nn.Hardtanh(-0.5, 2.0, True), lambda x: ops.hardtanh(x, -0.5, 2.0)),
    (lambda: nn.Hardsigmoid(), ops.hardsigmoid), (lambda: nn.Hardswish(True), ops.hardswish),
    (lambda: nn.SELU(), ops.selu), (lambda: nn.Mish(), ops.mish),
    (lambda: nn.LogSigmoid(), ops.logsigmoid), (lambda: nn.Softsign(), ops.softsign),
    (lambda: nn.Tanhshrink(), ops.tanhshrink), (lambda: nn.GLU(), ops.glu),
    (lambda: nn.GLU(dim=1), lambda x: ops.glu(x, axis=1)),
]


@pytest.mark.parametrize("make, op", MORE_LAYERS)
def test_more_layers_equal_their_ops(make, op):
    m = make()
    x = tg.tensor(_x(2, 4, 6) * 4, requires_grad=True)
    y = m(x)
    np.testing.assert_array_equal(y.numpy(), op(x).numpy())
    assert y.dtype == np.float32 and list(m.parameters()) == [] and m.state_dict() == {}
    y.sum().backward()
    assert x.grad.shape == x.shape


def test_more_reprs_are_pytorchs():
    assert repr(nn.ReLU6()) == "ReLU6()" and repr(nn.ReLU6(True)) == "ReLU6(inplace=True)"
    assert repr(nn.Hardtanh()) == "Hardtanh(min_val=-1.0, max_val=1.0)"
    assert repr(nn.Hardtanh(-2, 3.5, True)) == "Hardtanh(min_val=-2, max_val=3.5, inplace=True)"
    assert repr(nn.Hardsigmoid(True)) == "Hardsigmoid()" and repr(nn.Hardswish()) == "Hardswish()"
    assert repr(nn.SELU()) == "SELU()" and repr(nn.SELU(inplace=True)) == "SELU(inplace=True)"
    assert repr(nn.Mish(True)) == "Mish(inplace=True)" and repr(nn.LogSigmoid()) == "LogSigmoid()"
    assert repr(nn.Softsign()) == "Softsign()" and repr(nn.Tanhshrink()) == "Tanhshrink()"
    assert repr(nn.GLU()) == "GLU(dim=-1)" and repr(nn.GLU(1)) == "GLU(dim=1)"


def test_more_reprs_match_torch():
    torch = pytest.importorskip("torch")
    for name, args in (("ReLU6", ()), ("ReLU6", (True,)), ("Hardtanh", ()),
                       ("Hardtanh", (-2, 3.5, True)), ("Hardsigmoid", (True,)),
                       ("Hardswish", (True,)), ("SELU", ()), ("SELU", (True,)), ("Mish", ()),
                       ("Mish", (True,)), ("LogSigmoid", ()), ("Softsign", ()),
                       ("Tanhshrink", ()), ("GLU", ()), ("GLU", (0,))):
        assert repr(getattr(nn, name)(*args)) == repr(getattr(torch.nn, name)(*args))


def test_more_layer_errors():
    with pytest.raises(ArgumentError, match=r"Hardtanh: max_val \(1\) must be greater than "
                                            r"min_val \(1\)"):
        nn.Hardtanh(1, 1)
    with pytest.raises(ShapeError, match="glu: the halved axis 1"):
        nn.GLU(1)(tg.tensor(_x(2, 3)))


def test_more_functional_names_take_torchs_signatures():
    x = tg.tensor(_x(2, 3, 4) * 4)
    for ours, op in ((F.relu6(x, inplace=True), ops.relu6(x)),
                     (F.relu6(input=x), ops.relu6(x)),
                     (F.hardtanh(x, -2.0, 0.5, False), ops.hardtanh(x, -2.0, 0.5)),
                     (F.hardtanh(input=x, min_val=-0.5, max_val=1.5, inplace=True),
                      ops.hardtanh(x, -0.5, 1.5)),
                     (F.hardsigmoid(x, inplace=True), ops.hardsigmoid(x)),
                     (F.hardswish(input=x, inplace=False), ops.hardswish(x)),
                     (F.selu(x, True), ops.selu(x)), (F.mish(input=x, inplace=True), ops.mish(x)),
                     (F.logsigmoid(input=x), ops.logsigmoid(x)), (F.softsign(x), ops.softsign(x)),
                     (F.tanhshrink(input=x), ops.tanhshrink(x)),
                     (F.glu(x, dim=2), ops.glu(x, axis=2)), (F.glu(input=x), ops.glu(x))):
        np.testing.assert_array_equal(ours.numpy(), op.numpy())


def test_more_layers_match_torch_nn():
    torch = pytest.importorskip("torch")
    for name, args in (("ReLU6", ()), ("Hardtanh", (-0.5, 2.0)), ("Hardsigmoid", ()),
                       ("Hardswish", ()), ("SELU", ()), ("Mish", ()), ("LogSigmoid", ()),
                       ("Softsign", ()), ("Tanhshrink", ()), ("GLU", ()), ("GLU", (1,))):
        x = _x(2, 4, 6, seed=3) * 4
        g = _x(*((2, 2, 6) if args == (1,) else (2, 4, 3) if name == "GLU" else x.shape), seed=4)
        xt, xr = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        y, yr = getattr(nn, name)(*args)(xt), getattr(torch.nn, name)(*args)(xr)
        y.backward(tg.tensor(g))
        yr.backward(torch.from_numpy(g))
        np.testing.assert_allclose(y.numpy(), yr.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
        np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=name)
