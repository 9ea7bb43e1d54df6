"""Module: registration, traversal, repr, modes, state_dict, to()."""

import copy

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.errors import TapegradError


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.scale = nn.Parameter(tg.ones(4))
        self.register_buffer("count", tg.zeros(()))
        self.register_buffer("scratch", tg.zeros(2), persistent=False)
        self.act = nn.ReLU()
        self.note = "plain attribute"

    def forward(self, x):
        return self.act(self.fc(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(2, 3), nn.Tanh())
        self.block = Block()
        self.head = nn.Linear(4, 1, bias=False)

    def forward(self, x):
        return self.head(self.block(self.features(x)))


def test_registration_and_traversal():
    tg.manual_seed(0)
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    assert names == ["features.0.weight", "features.0.bias", "block.scale", "block.fc.weight",
                     "block.fc.bias", "head.weight"]
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in net.parameters())
    assert [n for n, _ in net.named_buffers()] == ["block.count", "block.scratch"]
    assert [n for n, _ in net.named_children()] == ["features", "block", "head"]
    assert [n for n, _ in net.named_modules()] == [
        "", "features", "features.0", "features.1", "block", "block.fc", "block.act", "head"]
    assert len(list(net.modules())) == 8
    assert net.block.note == "plain attribute"
    assert "note" not in net.block._parameters
    assert [n for n, _ in net.block.named_parameters(recurse=False)] == ["scale"]
    assert net.head.bias is None
    # re-assigning a name moves it between kinds
    net.block.scale = nn.Linear(1, 1)
    assert "scale" in net.block._modules and "scale" not in net.block._parameters
    del net.block.scale
    assert not hasattr(net.block, "scale")


def test_shared_parameters_counted_once():
    lin = nn.Linear(2, 2)
    seq = nn.Sequential(lin, nn.ReLU(), lin)
    assert len(list(seq.parameters())) == 2
    assert list(seq.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_assignment_errors():
    class Bad(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(tg.zeros(2))  # no super().__init__()

    with pytest.raises(AttributeError, match="super"):
        Bad()
    lin = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="Parameter"):
        lin.weight = tg.zeros((2, 2))
    with pytest.raises(TypeError):
        lin.register_buffer("b", np.zeros(2))
    with pytest.raises(KeyError):
        lin.register_buffer("a.b", tg.zeros(2))


def test_repr_like_pytorch():
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.ReLU(),
                        nn.Sequential(nn.Flatten(), nn.Linear(8, 2)))
    assert repr(net) == (
        "Sequential(\n"
        "  (0): Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)\n"
        "  (1): ReLU()\n"
        "  (2): Sequential(\n"
        "    (0): Flatten(start_dim=1, end_dim=-1)\n"
        "    (1): Linear(in_features=8, out_features=2, bias=True)\n"
        "  )\n"
        ")")
    assert repr(nn.Parameter(tg.zeros(1))).startswith("Parameter containing:\n")


def test_train_eval_and_zero_grad():
    net = Net()
    assert net.training and net.block.fc.training
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    net(tg.randn(5, 2)).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(float(abs(p.grad).sum()) == 0 for p in net.parameters())
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_call_runs_forward_and_records():
    net = Net()
    y = net(tg.randn(4, 2))
    assert y.shape == (4, 1) and y.requires_grad
    with tg.no_grad():
        assert not net(tg.randn(4, 2)).requires_grad


def test_sequential_and_modulelist():
    seq = nn.Sequential(nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear)
    sub = seq[:2]
    assert isinstance(sub, nn.Sequential) and len(sub) == 2 and sub[0] is seq[0]
    seq[1] = nn.Tanh()
    assert isinstance(seq[1], nn.Tanh)
    with pytest.raises(IndexError):
        seq[3]
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    ml.append(nn.Linear(2, 1))
    assert len(ml) == 4 and len(list(ml.parameters())) == 8
    assert [n for n, _ in ml.named_parameters()][-1] == "3.bias"
    del ml[0]
    assert [n for n, _ in ml.named_children()] == ["0", "1", "2"]
    from collections import OrderedDict
    named = nn.Sequential(OrderedDict(conv=nn.Conv2d(1, 1, 1), act=nn.ReLU()))
    assert list(named.state_dict()) == ["conv.weight", "conv.bias"]


def test_state_dict_round_trip_shares_nothing_after_load():
    tg.manual_seed(1)
    a = Net()
    tg.manual_seed(2)
    b = Net()
    sd = a.state_dict()
    assert list(sd) == ["features.0.weight", "features.0.bias", "block.scale", "block.count",
                        "block.fc.weight", "block.fc.bias", "head.weight"]
    assert "block.scratch" not in sd  # non-persistent
    assert all(not t.requires_grad for t in sd.values())
    res = b.load_state_dict(sd)
    assert res.missing_keys == [] and res.unexpected_keys == []
    for (n, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        np.testing.assert_array_equal(x.numpy(), y.numpy(), err_msg=n)
    # copies, not aliases
    a.head.weight.array[...] = 7
    assert not np.any(b.head.weight.numpy() == 7)
    x = tg.randn(3, 2)
    np.testing.assert_allclose(b(x).numpy(), Net.forward(b, x).numpy())


def test_load_state_dict_accepts_arrays_and_casts():
    lin = nn.Linear(2, 2)
    lin.load_state_dict({"weight": np.arange(4.0).reshape(2, 2), "bias": [1.0, 2.0]})
    assert lin.weight.dtype == np.float32
    np.testing.assert_array_equal(lin.bias.numpy(), [1, 2])


def test_load_state_dict_strict_errors_and_no_half_load():
    tg.manual_seed(0)
    net = Net()
    before = {k: v.numpy() for k, v in net.state_dict().items()}
    version = net.features[0].weight.version
    good = {k: v.numpy() + 1 for k, v in net.state_dict().items()}

    bad = dict(good)
    bad["head.weight"] = np.zeros((2, 4), np.float32)
    with pytest.raises(nn.StateDictError) as e:
        net.load_state_dict(bad)
    msg = str(e.value)
    assert "head.weight" in msg and "(2, 4)" in msg and "(1, 4)" in msg
    assert isinstance(e.value, TapegradError)

    missing = dict(good)
    del missing["block.fc.bias"]
    missing["extra.weight"] = np.zeros(3)
    with pytest.raises(nn.StateDictError) as e:
        net.load_state_dict(missing)
    assert "missing key 'block.fc.bias'" in str(e.value)
    assert "unexpected key 'extra.weight'" in str(e.value)

    # nothing was written by the failed loads (the good keys came first)
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k], err_msg=k)
    assert net.features[0].weight.version == version

    # non-strict: missing/unexpected are reported, shapes still checked
    res = net.load_state_dict(missing, strict=False)
    assert res.missing_keys == ["block.fc.bias"] and res.unexpected_keys == ["extra.weight"]
    np.testing.assert_array_equal(net.head.weight.numpy(), good["head.weight"])
    with pytest.raises(nn.StateDictError, match="size mismatch"):
        net.load_state_dict(bad, strict=False)


def test_to_keeps_identity_and_casts():
    net = Net()
    params = list(net.parameters())
    net(tg.randn(2, 2)).sum().backward()
    assert net.to("cpu") is net
    assert [id(p) for p in net.parameters()] == [id(p) for p in params]
    net.double()
    assert all(p.dtype == np.float64 for p in net.parameters())
    assert all(p.grad.dtype == np.float64 for p in net.parameters())
    assert net.block.count.dtype == np.float64
    assert [id(p) for p in net.parameters()] == [id(p) for p in params]
    y = net(tg.randn(2, 2, dtype=np.float64))
    assert y.dtype == np.float64


def test_deepcopy_gives_independent_parameters():
    net = Net()
    twin = copy.deepcopy(net)
    assert isinstance(twin.head.weight, nn.Parameter)
    twin.head.weight.array[...] = 0
    assert np.any(net.head.weight.numpy() != 0)


def test_requires_grad_and_apply():
    net = Net()
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "Net" and seen.count("Linear") == 3


@pytest.mark.gpu
def test_to_cuda_and_back():
    net = Net()
    w = net.head.weight
    net.to("cuda")
    assert w.device.type == "cuda" and net.head.weight is w
    assert net.block.count.device.type == "cuda"
    y = net(tg.randn(3, 2, device="cuda"))
    y.sum().backward()
    assert w.grad.device.type == "cuda"
    net.cpu()
    assert w.device.type == "cpu" and w.grad.device.type == "cpu"
