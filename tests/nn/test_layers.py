"""Every layer: forward equals its functional op, and torch.nn when installed."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, ops
from tapegrad.errors import ArgumentError

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch not installed")


def _rng(seed=0):
    return np.random.default_rng(seed)


def _x(*shape, seed=0):
    return _rng(seed).standard_normal(shape).astype(np.float32)


def _copy_params(ours, theirs):
    """Our parameters and buffers into the torch module (same names)."""
    sd = {k: torch.from_numpy(v.numpy()) for k, v in ours.state_dict().items()}
    theirs.load_state_dict(sd, strict=True)


def _compare_with_torch(ours, theirs, x, atol=1e-5, grads=True):
    _copy_params(ours, theirs)
    xt = tg.tensor(x, requires_grad=True)
    xr = torch.tensor(x, requires_grad=True)
    y = ours(xt)
    yr = theirs(xr)
    np.testing.assert_allclose(y.numpy(), yr.detach().numpy(), atol=atol, rtol=1e-5)
    if grads:
        w = _x(*y.shape, seed=9)
        (y * tg.tensor(w)).sum().backward()
        (yr * torch.from_numpy(w)).sum().backward()
        np.testing.assert_allclose(xt.grad.numpy(), xr.grad.numpy(), atol=atol, rtol=1e-4)
        theirs_params = dict(theirs.named_parameters())
        for name, p in ours.named_parameters():
            np.testing.assert_allclose(p.grad.numpy(), theirs_params[name].grad.numpy(),
                                       atol=atol * 10, rtol=1e-4, err_msg=name)


def test_linear_matches_functional():
    lin = nn.Linear(5, 3)
    x = tg.tensor(_x(4, 5))
    np.testing.assert_array_equal(lin(x).numpy(), ops.linear(x, lin.weight, lin.bias).numpy())
    nobias = nn.Linear(5, 3, bias=False)
    assert nobias.bias is None and len(list(nobias.parameters())) == 1
    assert nn.Linear(2, 2, dtype=np.float64).weight.dtype == np.float64


def test_conv_layers_match_functional():
    x = tg.tensor(_x(2, 4, 7, 6))
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2)
    assert conv.weight.shape == (6, 2, 3, 3)
    ref = ops.conv2d(x, conv.weight, conv.bias, (2, 2), (1, 1), (1, 1), 2)
    np.testing.assert_array_equal(conv(x).numpy(), ref.numpy())
    deconv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
    assert deconv.weight.shape == (4, 3, 3, 3)
    ref = ops.conv_transpose2d(x, deconv.weight, deconv.bias, (2, 2), (1, 1), (1, 1), 2)
    np.testing.assert_array_equal(deconv(x).numpy(), ref.numpy())
    with pytest.raises(ValueError, match="divisible"):
        nn.Conv2d(3, 6, 3, groups=2)


def test_conv_layers_take_the_paddings_their_ops_take():
    # (top, bottom, left, right) and "same"/"valid" used to fail in the layer's own
    # parser (ValueError: ... pair of ints; int("s")) though the op takes them
    x = tg.tensor(_x(2, 4, 7, 6))
    for padding in [(1, 0, 2, 1), "same", "valid", 2, (1, 2)]:
        conv = nn.Conv2d(4, 6, (3, 2), padding=padding)
        ref = ops.conv2d(x, conv.weight, conv.bias, padding=padding)
        np.testing.assert_array_equal(conv(x).numpy(), ref.numpy())
    assert nn.Conv2d(4, 6, 3, padding="same")(x).shape == (2, 6, 7, 6)
    assert "padding=(1, 0, 2, 1)" in repr(nn.Conv2d(4, 6, 3, padding=(1, 0, 2, 1)))
    deconv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=(1, 0, 0, 1))
    ref = ops.conv_transpose2d(x, deconv.weight, deconv.bias, 2, (1, 0, 0, 1))
    np.testing.assert_array_equal(deconv(x).numpy(), ref.numpy())
    for make, words in [
        (lambda: nn.Conv2d(4, 6, 3, padding="full"), r"Conv2d: padding .*'full'"),
        (lambda: nn.Conv2d(4, 6, 3, stride=2, padding="same"), r"'same' needs stride 1"),
        (lambda: nn.ConvTranspose2d(4, 6, 3, padding="same"), r"ConvTranspose2d: padding"),
        (lambda: nn.Conv2d(4, 6, 3, padding=(1, 2, 3)), r"Conv2d: padding"),
        (lambda: nn.Conv2d(4, 6, 3, padding=-1), r"Conv2d: padding must be non-negative"),
        (lambda: nn.Conv2d(4, 6, 3, stride=0), r"Conv2d: stride must be >= 1"),
        (lambda: nn.ConvTranspose2d(4, 6, 3, output_padding=-1), r"output_padding must be >= 0"),
    ]:
        with pytest.raises(ArgumentError, match=words):
            make()


@needs_torch
@pytest.mark.parametrize("make", [
    lambda m: m.Linear(5, 3),
    lambda m: m.Conv2d(4, 6, 3, stride=2, padding=1, groups=2),
    lambda m: m.Conv2d(4, 2, (3, 2), padding=(2, 1), dilation=2, bias=False),
    lambda m: m.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2),
    lambda m: m.ConvTranspose2d(4, 3, 2, stride=1, dilation=2, bias=False),
])
def test_parametrised_layers_match_torch(make):
    tg.manual_seed(0)
    ours, theirs = make(nn), make(torch.nn)
    x = _x(3, 5) if isinstance(ours, nn.Linear) else _x(2, 4, 7, 6)
    _compare_with_torch(ours, theirs, x, atol=1e-5)


@needs_torch
@pytest.mark.parametrize("make", [
    lambda m: m.MaxPool2d(2),
    lambda m: m.MaxPool2d(3, stride=2, padding=1, ceil_mode=True),
    lambda m: m.AvgPool2d(2),
    lambda m: m.AvgPool2d(3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    lambda m: m.AvgPool2d(3, stride=2, padding=1),
    lambda m: m.LocalResponseNorm(3, alpha=1e-2, beta=0.75, k=2.0),
    lambda m: m.ReLU(),
    lambda m: m.LeakyReLU(0.2),
    lambda m: m.Sigmoid(),
    lambda m: m.Tanh(),
    lambda m: m.Softmax(dim=1),
    lambda m: m.LogSoftmax(dim=1),
    lambda m: m.Flatten(),
    lambda m: m.Identity(),
])
def test_parameterless_layers_match_torch(make):
    ours, theirs = make(nn), make(torch.nn)
    _compare_with_torch(ours, theirs, _x(2, 5, 7, 6), atol=1e-5)


def test_parameterless_layers_match_functional():
    x = tg.tensor(_x(2, 3, 6, 6))
    pairs = [
        (nn.MaxPool2d(2, ceil_mode=True), ops.max_pool2d(x, 2, 2, 0, True)),
        (nn.AvgPool2d(3, 1, 1, count_include_pad=False), ops.avg_pool2d(x, 3, 1, 1, False, False)),
        (nn.LocalResponseNorm(5), ops.local_response_norm(x, 5, 1e-4, 0.75, 1.0)),
        (nn.ReLU(inplace=True), ops.relu(x)),
        (nn.LeakyReLU(0.3), ops.leaky_relu(x, 0.3)),
        (nn.Sigmoid(), ops.sigmoid(x)),
        (nn.Tanh(), ops.tanh(x)),
        (nn.Softmax(dim=1), ops.softmax(x, axis=1)),
        (nn.LogSoftmax(dim=-1), ops.log_softmax(x, axis=-1)),
        (nn.Flatten(), ops.flatten(x, 1, -1)),
        (nn.Flatten(0, 1), ops.flatten(x, 0, 1)),
    ]
    for layer, ref in pairs:
        np.testing.assert_array_equal(layer(x).numpy(), ref.numpy(), err_msg=repr(layer))


@needs_torch
@pytest.mark.parametrize("cls,shape", [("BatchNorm1d", (8, 3)), ("BatchNorm1d", (4, 3, 5)),
                                       ("BatchNorm2d", (4, 3, 5, 2))])
@pytest.mark.parametrize("momentum", [0.1, None])
def test_batchnorm_matches_torch_train_and_eval(cls, shape, momentum):
    ours = getattr(nn, cls)(3, momentum=momentum)
    theirs = getattr(torch.nn, cls)(3, momentum=momentum)
    with tg.no_grad():
        ours.weight.array[...] = [0.5, 1.5, -1.0]
        ours.bias.array[...] = [0.1, 0.0, -0.2]
    for step in range(3):  # several steps: running statistics accumulate
        _compare_with_torch(ours, theirs, _x(*shape, seed=step) * 2 + 1, atol=1e-4)
        for name in ("running_mean", "running_var"):
            np.testing.assert_allclose(getattr(ours, name).numpy(),
                                       getattr(theirs, name).numpy(), rtol=1e-5, atol=1e-6)
        assert int(ours.num_batches_tracked.item()) == int(theirs.num_batches_tracked) == step + 1
        for p in ours.parameters():
            p.grad = None
        theirs.zero_grad()
    ours.eval()
    theirs.eval()
    x = _x(*shape, seed=7)
    y = ours(tg.tensor(x))
    np.testing.assert_allclose(y.numpy(), theirs(torch.from_numpy(x)).detach().numpy(),
                               atol=1e-5)
    assert int(ours.num_batches_tracked.item()) == 3  # eval does not count


def test_batchnorm_buffers_and_errors():
    bn = nn.BatchNorm2d(4)
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                     "num_batches_tracked"]
    assert bn.num_batches_tracked.dtype == np.int64
    np.testing.assert_array_equal(bn.weight.numpy(), np.ones(4))
    np.testing.assert_array_equal(bn.running_var.numpy(), np.ones(4))
    with pytest.raises(ValueError, match="4-D"):
        bn(tg.zeros(2, 4))
    with pytest.raises(ValueError, match="channels"):
        bn(tg.zeros(2, 3, 2, 2))
    plain = nn.BatchNorm1d(3, affine=False, track_running_stats=False)
    assert list(plain.state_dict()) == []
    y = plain.eval()(tg.tensor(_x(6, 3)))  # always batch statistics
    np.testing.assert_allclose(y.numpy().mean(0), 0, atol=1e-5)


def test_dropout_train_and_eval():
    tg.manual_seed(0)
    drop = nn.Dropout(0.25)
    x = tg.ones(200, 50)
    y = drop(x).numpy()
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.02
    np.testing.assert_allclose(y[kept], 1 / 0.75, rtol=1e-6)
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), x.numpy())
    assert repr(drop) == "Dropout(p=0.25)"
    with pytest.raises(ValueError):
        nn.Dropout(1.5)


@needs_torch
def test_losses_match_torch():
    logits = _x(6, 4)
    target = np.array([0, 3, 1, 1, 2, -100])
    w = np.array([1.0, 2.0, 0.5, 1.0], np.float32)
    for kwargs in [{}, {"reduction": "sum"}, {"reduction": "none", "label_smoothing": 0.1},
                   {"weight": w}]:
        ours = nn.CrossEntropyLoss(**kwargs)
        tkw = dict(kwargs)
        if "weight" in tkw:
            tkw["weight"] = torch.from_numpy(w)
        theirs = torch.nn.CrossEntropyLoss(**tkw)
        x = tg.tensor(logits, requires_grad=True)
        xr = torch.tensor(logits, requires_grad=True)
        y, yr = ours(x, tg.tensor(target)), theirs(xr, torch.from_numpy(target))
        np.testing.assert_allclose(y.numpy(), yr.detach().numpy(), rtol=1e-5, atol=1e-6)
        y.sum().backward()
        yr.sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-5, atol=1e-6)
    a, b = _x(3, 4), _x(3, 4, seed=1)
    for red in ("mean", "sum", "none"):
        ours = nn.MSELoss(reduction=red)(tg.tensor(a), tg.tensor(b))
        theirs = torch.nn.MSELoss(reduction=red)(torch.from_numpy(a), torch.from_numpy(b))
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-6)


def test_losses_match_functional():
    logits, target = tg.tensor(_x(5, 3)), tg.tensor([0, 2, 1, 1, 0])
    ce = nn.CrossEntropyLoss(weight=[1.0, 2.0, 3.0], label_smoothing=0.05)
    assert list(ce.state_dict()) == ["weight"]
    ref = ops.cross_entropy(logits, target, ce.weight, -100, "mean", 0.05)
    np.testing.assert_array_equal(ce(logits, target).numpy(), ref.numpy())
    a, b = tg.tensor(_x(2, 3)), tg.tensor(_x(2, 3, seed=1))
    np.testing.assert_array_equal(nn.MSELoss(reduction="sum")(a, b).numpy(),
                                  ops.mse_loss(a, b, "sum").numpy())
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")


@pytest.mark.parametrize("layer", [nn.CrossEntropyLoss, nn.MSELoss])
def test_loss_layer_reduction_error_is_an_argument_error(layer):
    with pytest.raises(ArgumentError, match=rf"{layer.__name__}: reduction must be one of"):
        layer(reduction="avg")


def test_batch_norm_layers_take_an_empty_batch():
    bn = nn.BatchNorm2d(3)
    rm, rv = bn.running_mean.numpy().copy(), bn.running_var.numpy().copy()
    x = tg.tensor(np.zeros((0, 3, 4, 4), np.float32), requires_grad=True)
    y = bn(x)  # training: no batch statistics, the running ones stay
    y.sum().backward()
    assert y.shape == x.grad.shape == (0, 3, 4, 4)
    np.testing.assert_array_equal(bn.weight.grad.numpy(), np.zeros(3, np.float32))
    np.testing.assert_array_equal(bn.running_mean.numpy(), rm)
    np.testing.assert_array_equal(bn.running_var.numpy(), rv)
    bn1 = nn.BatchNorm1d(3).eval()
    assert bn1(tg.tensor(np.zeros((0, 3), np.float32))).shape == (0, 3)


def test_batch_norm_layer_float16():
    bn = nn.BatchNorm1d(4, dtype=np.float16)
    x16 = (np.random.default_rng(3).normal(size=(4096, 4)) * 100).astype(np.float16)
    y = bn(tg.tensor(x16))
    assert y.dtype == bn.running_var.dtype == np.float16
    assert np.all(np.isfinite(y.numpy()))
    np.testing.assert_allclose(y.numpy().astype(np.float64).std(axis=0), np.ones(4), rtol=2e-3)
    want = 0.9 + 0.1 * x16.astype(np.float64).var(axis=0, ddof=1)
    np.testing.assert_allclose(bn.running_var.numpy().astype(np.float64), want, rtol=2e-3)


def test_softmax_layers_default_to_the_ops_axis():
    # before: nn.Softmax() used dim=1 and raised on a 1-D input, where ops.softmax works
    x = tg.tensor([1.0, 2.0])
    np.testing.assert_allclose(nn.Softmax()(x).numpy(), ops.softmax(x).numpy())
    want = np.log(np.full((2, 3), 1 / 3))
    np.testing.assert_allclose(nn.LogSoftmax()(tg.ones(2, 3)).numpy(), want, rtol=1e-6)


def test_layers_expose_their_ops_conventions_and_show_them():
    x = tg.randn(2, 6, 5, 5)
    lrn = nn.LocalResponseNorm(3, alpha=0.1, alpha_over_size=False)
    np.testing.assert_allclose(
        lrn(x).numpy(), tg.ops.local_response_norm(x, 3, 0.1, 0.75, 1.0, False).numpy())
    assert repr(lrn).endswith("alpha_over_size=False)")
    assert "alpha_over_size" not in repr(nn.LocalResponseNorm(3))
    pool = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)
    assert repr(pool) == ("AvgPool2d(kernel_size=3, stride=2, padding=1, ceil_mode=True, "
                          "count_include_pad=False)")
    assert repr(nn.AvgPool2d(2)) == "AvgPool2d(kernel_size=2, stride=2, padding=0)"
    np.testing.assert_allclose(pool(x).numpy(), tg.ops.avg_pool2d(x, 3, 2, 1, True, False).numpy())
