"""nn.init: statistics, gains and fans, PyTorch's per-layer defaults, seeding."""

import math

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.nn import init


def _p(*shape):
    return nn.Parameter(tg.zeros(*shape))


def test_fans_and_gains():
    assert init.calculate_fan_in_and_fan_out(tg.zeros(6, 4)) == (4, 6)
    assert init.calculate_fan_in_and_fan_out(tg.zeros(8, 3, 5, 5)) == (75, 200)
    with pytest.raises(ValueError):
        init.calculate_fan_in_and_fan_out(tg.zeros(3))
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("conv2d") == 1.0
    assert init.calculate_gain("leaky_relu") == pytest.approx(math.sqrt(2 / (1 + 0.01 ** 2)))
    assert init.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    with pytest.raises(ValueError):
        init.calculate_gain("swish")


def test_distribution_statistics():
    tg.manual_seed(0)
    w = _p(400, 300)  # fan_in 300, fan_out 400
    n = w.numel()
    cases = [
        (init.uniform_, dict(a=-2, b=4), 1.0, math.sqrt(36 / 12), (-2, 4)),
        (init.normal_, dict(mean=3, std=0.5), 3.0, 0.5, None),
        (init.xavier_uniform_, dict(gain=2.0), 0.0, 2 * math.sqrt(2 / 700),
         (-2 * math.sqrt(6 / 700), 2 * math.sqrt(6 / 700))),
        (init.xavier_normal_, {}, 0.0, math.sqrt(2 / 700), None),
        (init.kaiming_uniform_, dict(nonlinearity="relu"), 0.0, math.sqrt(2 / 300),
         (-math.sqrt(6 / 300), math.sqrt(6 / 300))),
        (init.kaiming_normal_, dict(mode="fan_out", nonlinearity="relu"), 0.0,
         math.sqrt(2 / 400), None),
    ]
    for fn, kwargs, mean, std, bounds in cases:
        v0 = w.version
        assert fn(w, **kwargs) is w
        a = w.numpy()
        assert w.version == v0 + 1 and a.dtype == np.float32
        assert abs(a.mean() - mean) < 4 * std / math.sqrt(n), fn.__name__
        assert abs(a.std() - std) < 0.02 * std, fn.__name__
        if bounds:
            assert bounds[0] <= a.min() and a.max() <= bounds[1]
    init.constant_(w, 0.25)
    assert np.all(w.numpy() == 0.25)
    init.zeros_(w)
    assert not w.numpy().any()
    init.ones_(w)
    assert np.all(w.numpy() == 1)


def test_init_records_nothing_on_the_tape():
    w = _p(3, 4)
    init.kaiming_uniform_(w)
    init.normal_(w)
    assert w.is_leaf and w.requires_grad and w.grad_fn is None
    lin = nn.Linear(3, 2)
    assert all(p.is_leaf and p.grad_fn is None for p in lin.parameters())


@pytest.mark.parametrize("make,fan_in", [
    (lambda: nn.Linear(50, 40), 50),
    (lambda: nn.Conv2d(6, 30, 3, groups=2), 27),
    (lambda: nn.ConvTranspose2d(6, 40, 2), 160),  # PyTorch: fan-in from weight axis 1
])
def test_pytorch_default_layer_init(make, fan_in):
    tg.manual_seed(1)
    layer = make()
    bound = 1 / math.sqrt(fan_in)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.1 * bound / math.sqrt(3)
    assert np.abs(b).max() <= bound and len(np.unique(b)) == b.size


def test_batchnorm_default_init():
    bn = nn.BatchNorm2d(5)
    np.testing.assert_array_equal(bn.weight.numpy(), np.ones(5))
    np.testing.assert_array_equal(bn.bias.numpy(), np.zeros(5))
    np.testing.assert_array_equal(bn.running_mean.numpy(), np.zeros(5))


def _make_net():
    return nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.Dropout(0.3),
                         nn.Linear(4 * 4 * 4, 3))


def _train(seed, steps=4):
    tg.manual_seed(seed)
    net = _make_net()
    opt = optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
    x = tg.randn(8, 1, 6, 6)
    y = tg.randint(0, 3, (8,))
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.CrossEntropyLoss()(net(x), y)  # dropout draws from the generator too
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return net, losses


def test_manual_seed_gives_identical_weights_and_training_runs():
    tg.manual_seed(123)
    a = _make_net()
    tg.manual_seed(123)
    b = _make_net()
    for (n, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy(), err_msg=n)
    c = _make_net()  # the generator moved on
    assert not np.array_equal(a[0].weight.numpy(), c[0].weight.numpy())

    net1, losses1 = _train(7)
    net2, losses2 = _train(7)
    assert losses1 == losses2
    assert losses1[-1] < losses1[0]
    for p, q in zip(net1.parameters(), net2.parameters()):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    _, losses3 = _train(8)
    assert losses3 != losses1
