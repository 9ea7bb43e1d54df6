"""nn.init: statistics, gains and fans, PyTorch's per-layer defaults, seeding."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

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


# ------------------------------------------ orthogonal_, sparse_, dirac_, eye_, generator=

class _Fixed(np.random.Generator):
    """A generator whose normal samples are given (to replay PyTorch's)."""

    def __init__(self, normal):
        super().__init__(np.random.PCG64(0))
        self.normal = normal

    def standard_normal(self, size=None, *args, **kwargs):
        assert tuple(size) == self.normal.shape
        return self.normal.copy()


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 4), (2, 3, 2), (6, 2, 2, 1), (1, 7)])
def test_orthogonal_is_pytorchs_construction(shape):
    torch = pytest.importorskip("torch")
    rows, cols = shape[0], math.prod(shape[1:])
    g = torch.Generator().manual_seed(5)
    want = torch.nn.init.orthogonal_(torch.empty(shape, dtype=torch.float64), 1.5, g)
    z = torch.empty((rows, cols), dtype=torch.float64).normal_(0, 1,
                                                                generator=g.manual_seed(5))
    w = tg.zeros(*shape, dtype=np.float64)
    assert init.orthogonal_(w, 1.5, _Fixed(z.numpy())) is w
    np.testing.assert_allclose(w.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 2, 3)])
def test_orthogonal_rows_or_columns_are_orthonormal(shape):
    tg.manual_seed(0)
    w = _p(*shape)
    v0 = w.version
    init.orthogonal_(w, gain=2.0)
    assert w.version == v0 + 1 and w.dtype == np.float32 and w.is_leaf and w.grad_fn is None
    m = w.numpy().reshape(shape[0], -1).astype(np.float64)
    small = m @ m.T if m.shape[0] <= m.shape[1] else m.T @ m
    np.testing.assert_allclose(small, 4 * np.eye(len(small)), atol=1e-5)


def test_orthogonal_is_haar_distributed():
    # Q uniform on O(n): every entry has mean 0 and variance 1/n, and det is +-1 evenly
    tg.manual_seed(1)
    w = _p(3, 3)
    qs = np.stack([init.orthogonal_(w).numpy().astype(np.float64) for _ in range(1500)])
    assert np.abs(qs.mean(0)).max() < 0.06
    np.testing.assert_allclose(qs.var(0), 1 / 3, atol=0.05)
    assert 0.4 < (np.linalg.det(qs) > 0).mean() < 0.6


def test_structured_inits_errors_and_empty_tensors():
    with pytest.raises(ValueError, match="Only tensors with 2 or more dimensions"):
        init.orthogonal_(_p(3))
    for fn, args in ((init.sparse_, (0.1,)), (init.eye_, ())):
        with pytest.raises(ValueError, match=r"Only tensors with 2 dimensions .* \(2, 3, 4\)"):
            fn(_p(2, 3, 4), *args)
    with pytest.raises(ValueError, match="Only tensors with 3, 4, or 5 dimensions"):
        init.dirac_(_p(2, 2))
    with pytest.raises(ValueError, match="dim 0 must be divisible by groups"):
        init.dirac_(_p(3, 2, 2), 2)
    for groups in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="groups must be an int >= 1"):
            init.dirac_(_p(4, 2, 2), groups)
    with pytest.raises(TypeError, match="draws normal samples"):
        init.orthogonal_(tg.zeros(3, 3, dtype=np.int64))
    with pytest.raises(TypeError, match="draws normal samples"):
        init.sparse_(tg.zeros(3, 3, dtype=np.int64), 0.5)
    for bad in (float("nan"), "0.5", None):
        with pytest.raises(ValueError, match="sparsity must be a finite number"):
            init.sparse_(_p(3, 3), bad)
    with pytest.raises(TypeError, match="generator must be"):
        init.normal_(_p(3), generator=0)
    assert init.orthogonal_(_p(0, 3)).shape == (0, 3)
    assert init.sparse_(_p(0, 3), 0.5).shape == (0, 3)


@given(hs.integers(1, 9), hs.integers(0, 4), hs.floats(-1.0, 1.5))
def test_sparse_zero_count_per_column_is_pytorchs(rows, cols, sparsity):
    w = _p(rows, cols)
    init.sparse_(w, sparsity, std=2.0)
    zeros = (w.numpy() == 0).sum(0)
    # PyTorch: randperm(rows)[:ceil(sparsity * rows)], Python slicing of a count
    k = len(range(rows)[:math.ceil(sparsity * rows)])
    np.testing.assert_array_equal(zeros, [k] * cols)
    torch = pytest.importorskip("torch")
    t = torch.nn.init.sparse_(torch.empty(rows, cols), sparsity, std=2.0)
    np.testing.assert_array_equal((t.numpy() == 0).sum(0), zeros)


def test_sparse_values_and_random_zero_rows():
    tg.manual_seed(2)
    w = _p(400, 300)
    init.sparse_(w, 0.25, std=0.5)
    a = w.numpy()
    nz = a[a != 0]
    assert nz.size == 300 * 300 and abs(nz.std() - 0.5) < 0.02 and abs(nz.mean()) < 0.01
    # each row is zero in about a quarter of the columns: the zero rows differ per column
    per_row = (a == 0).mean(1)
    assert per_row.min() > 0.1 and per_row.max() < 0.4


@given(hs.integers(3, 5), hs.integers(1, 3), hs.integers(1, 4), hs.integers(1, 3),
       hs.data())
def test_dirac_and_eye_are_pytorchs(nd, groups, per_group, cin, data):
    torch = pytest.importorskip("torch")
    kernel = tuple(data.draw(hs.integers(1, 4)) for _ in range(nd - 2))
    shape = (groups * per_group, cin) + kernel
    w = _p(*shape)
    init.dirac_(w, groups)
    want = torch.nn.init.dirac_(torch.empty(shape), groups)
    np.testing.assert_array_equal(w.numpy(), want.numpy())
    e = tg.zeros(per_group, cin, dtype=np.int64)
    init.eye_(e)
    np.testing.assert_array_equal(e.numpy(), torch.nn.init.eye_(
        torch.empty(per_group, cin, dtype=torch.int64)).numpy())


def test_dirac_makes_a_convolution_the_identity():
    x = tg.randn(2, 4, 5, 5)
    conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
    init.dirac_(conv.weight)
    np.testing.assert_allclose(conv(x).numpy(), x.numpy(), atol=1e-6)
    e = init.eye_(_p(3, 5))
    np.testing.assert_array_equal(e.numpy(), np.eye(3, 5))


@pytest.mark.parametrize("fn,args", [
    (init.uniform_, (-1.0, 1.0)), (init.normal_, (0.0, 1.0)), (init.xavier_uniform_, (1.0,)),
    (init.xavier_normal_, (1.0,)), (init.kaiming_uniform_, (0, "fan_in", "relu")),
    (init.kaiming_normal_, (0, "fan_in", "relu")), (init.orthogonal_, (1,)),
    (init.sparse_, (0.5, 0.01)),
])
def test_generator_makes_an_init_repeatable_and_leaves_the_global_stream(fn, args):
    a, b, c = _p(6, 5), _p(6, 5), _p(6, 5)
    tg.manual_seed(0)
    fn(a, *args, tg.Generator().manual_seed(4))  # positional, as in PyTorch's signature
    after_a = tg.randn(3).numpy()
    tg.manual_seed(0)
    fn(b, *args, generator=tg.Generator().manual_seed(4))
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(tg.randn(3).numpy(), after_a)
    tg.manual_seed(0)
    assert np.array_equal(tg.randn(3).numpy(), after_a)  # the generator drew nothing global
    fn(c, *args, generator=tg.Generator().manual_seed(5))
    assert not np.array_equal(a.numpy(), c.numpy())
