"""ModuleDict/ParameterList/ParameterDict (nn/container.py), Unflatten and
Dropout2d (nn/linear.py), Embedding (nn/sparse.py) and the loss layers
(nn/loss.py): registration, state_dict, reprs, and torch's modules."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn
from tapegrad.errors import ArgumentError, ArgumentKeyError, ArgumentTypeError

R = np.random.default_rng(0)


def test_module_dict_registers_in_order_and_round_trips():
    d = nn.ModuleDict({"enc": nn.Linear(4, 3)})
    d["head"] = nn.Linear(3, 2)
    d.update([("act", nn.ReLU())])
    assert list(d.keys()) == ["enc", "head", "act"] and "head" in d and len(d) == 3
    assert sorted(d.state_dict()) == ["enc.bias", "enc.weight", "head.bias", "head.weight"]
    assert len(list(d.parameters())) == 4
    assert isinstance(d.pop("act"), nn.ReLU) and list(d) == ["enc", "head"]
    with pytest.raises(ArgumentKeyError, match="no key 'nope'"):
        d["nope"]
    with pytest.raises(ArgumentTypeError):
        d.update([1, 2])
    other = nn.ModuleDict({"enc": nn.Linear(4, 3), "head": nn.Linear(3, 2)})
    other.load_state_dict(d.state_dict())
    x = tg.randn(2, 4)
    np.testing.assert_array_equal(other["head"](other["enc"](x)).numpy(),
                                  d["head"](d["enc"](x)).numpy())


def test_parameter_list_and_dict():
    pl = nn.ParameterList([tg.ones(2), nn.Parameter(tg.zeros(3))])  # a Tensor is wrapped
    pl.append(tg.ones(1))
    assert [tuple(p.shape) for p in pl] == [(2,), (3,), (1,)]
    assert all(isinstance(p, nn.Parameter) for p in pl)
    owner = nn.Module()
    owner.ws = pl
    assert [n for n, _ in owner.named_parameters()] == ["ws.0", "ws.1", "ws.2"]
    pl.insert(0, tg.ones(4))
    del pl[2]
    assert [tuple(p.shape) for p in pl] == [(4,), (2,), (1,)]
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert tuple(pl[-1].shape) == (1,) and len(pl[1:]) == 2
    with pytest.raises(ArgumentTypeError, match="Parameter or Tensor"):
        pl.append(np.ones(2))
    pd = nn.ParameterDict({"scale": tg.ones(3)})
    pd["shift"] = nn.Parameter(tg.zeros(3))
    assert sorted(pd.state_dict()) == ["scale", "shift"] and pd["scale"].requires_grad
    y = (pd["scale"] * 2 + pd["shift"]).sum()
    y.backward()
    assert pd["scale"].grad.tolist() == [2, 2, 2]


def test_unflatten_and_dropout2d():
    x = tg.randn(2, 48)
    assert nn.Unflatten(1, (3, 4, 4))(x).shape == (2, 3, 4, 4)
    assert nn.Unflatten(-1, (-1, 4))(x).shape == (2, 12, 4)
    assert repr(nn.Unflatten(1, (3, 16))) == "Unflatten(dim=1, unflattened_size=(3, 16))"
    layer = nn.Dropout2d(0.5)
    tg.manual_seed(0)
    y = layer(tg.ones(4, 6, 2, 2)).numpy().reshape(4, 6, 4)
    assert np.all((y == 0).all(-1) | (y == 2).all(-1))
    layer.eval()
    x4 = tg.ones(4, 6, 2, 2)
    assert layer(x4) is x4


def test_embedding_layer():
    tg.manual_seed(0)
    emb = nn.Embedding(10, 4, padding_idx=-1)
    assert emb.padding_idx == 9 and (emb.weight.numpy()[9] == 0).all()
    assert 0.3 < emb.weight.numpy()[:9].std() < 2  # N(0, 1)
    idx = tg.tensor([[1, 9, 1]])
    out = emb(idx)
    assert out.shape == (1, 3, 4)
    out.sum().backward()
    g = emb.weight.grad.numpy()
    assert (g[1] == 2).all() and (g[9] == 0).all() and (g[0] == 0).all()
    assert repr(emb) == "Embedding(10, 4, padding_idx=9)"
    table = tg.randn(5, 3)
    frozen = nn.Embedding.from_pretrained(table)
    assert not frozen.weight.requires_grad
    assert np.array_equal(frozen(tg.tensor([2])).numpy(), table.numpy()[[2]])
    assert nn.Embedding.from_pretrained(table, freeze=False).weight.requires_grad
    with pytest.raises(ArgumentError, match="max_norm"):
        nn.Embedding(3, 2, max_norm=1.0)


def test_loss_layers_call_their_ops_and_show_their_options():
    x, y = tg.randn(4, 3), tg.randn(4, 3)
    assert nn.L1Loss()(x, y).item() == pytest.approx(np.abs(x.numpy() - y.numpy()).mean())
    assert nn.L1Loss(reduction="sum")(x, y).item() == pytest.approx(
        np.abs(x.numpy() - y.numpy()).sum(), rel=1e-6)
    assert nn.SmoothL1Loss(reduction="none", beta=0.5)(x, y).shape == (4, 3)
    assert repr(nn.SmoothL1Loss(beta=0.5)) == "SmoothL1Loss(beta=0.5)"
    assert repr(nn.MSELoss(reduction="sum")) == "MSELoss(reduction='sum')"
    assert repr(nn.CrossEntropyLoss()) == "CrossEntropyLoss()"
    logits, t = tg.randn(4, 3), tg.tensor([0, 2, 1, 2])
    ce = nn.CrossEntropyLoss(normalization="BATCH_SIZE", ignore_index=2)(logits, t)
    assert ce.item() == pytest.approx(
        tg.ops.cross_entropy(logits, t, ignore_index=2, normalization="BATCH_SIZE").item())
    logp = tg.ops.log_softmax(logits, axis=1)
    assert nn.NLLLoss()(logp, t).item() == pytest.approx(nn.CrossEntropyLoss()(logits, t).item())
    with pytest.raises(ArgumentError, match="reduction"):
        nn.L1Loss(reduction="avg")


def test_loss_layers_against_torch():
    torch = pytest.importorskip("torch")
    x, y = R.normal(size=(5, 3)), R.normal(size=(5, 3))
    t = np.array([0, 2, 1, 1, 2])
    pw = np.array([2.0, 0.5, 1.0])
    cases = [
        (nn.L1Loss(), torch.nn.L1Loss(), y),
        (nn.SmoothL1Loss(beta=0.7), torch.nn.SmoothL1Loss(beta=0.7), y),
        (nn.SmoothL1Loss(reduction="sum", beta=0.0), torch.nn.SmoothL1Loss(reduction="sum",
                                                                           beta=0.0), y),
        (nn.MSELoss(reduction="none"), torch.nn.MSELoss(reduction="none"), y),
        (nn.BCEWithLogitsLoss(pos_weight=tg.tensor(pw)),
         torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(pw)), 1 / (1 + np.exp(-y))),
        (nn.NLLLoss(ignore_index=1), torch.nn.NLLLoss(ignore_index=1), t),
        (nn.CrossEntropyLoss(label_smoothing=0.1), torch.nn.CrossEntropyLoss(label_smoothing=0.1),
         t),
    ]
    for ours, theirs, target in cases:
        xa, xt = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        a, b = ours(xa, tg.tensor(target)), theirs(xt, torch.tensor(target))
        np.testing.assert_allclose(a.numpy(), b.detach().numpy(), rtol=1e-12, atol=1e-12)
        a.sum().backward()
        b.sum().backward()
        np.testing.assert_allclose(xa.grad.numpy(), xt.grad.numpy(), rtol=1e-12, atol=1e-12)
    tg_emb, t_emb = nn.Embedding(6, 2), torch.nn.Embedding(6, 2)
    assert sorted(tg_emb.state_dict()) == sorted(t_emb.state_dict())


def test_parameter_dict_sorts_a_plain_dict_as_pytorch():
    from collections import OrderedDict

    pd = nn.ParameterDict({"z": tg.ones(1), "a": tg.ones(2)})
    assert list(pd.keys()) == ["a", "z"]
    po = nn.ParameterDict(OrderedDict([("z", tg.ones(1)), ("a", tg.ones(2))]))
    assert list(po.keys()) == ["z", "a"]
