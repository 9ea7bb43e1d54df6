"""tapegrad/nn/pairwise.py: each layer calls its op with its options, PyTorch's
reprs and signatures, buffers, errors, and agreement with torch.nn's modules."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, ops
from tapegrad.errors import ArgumentError

R = np.random.default_rng(0)
X, Y = R.normal(size=(4, 5)), R.normal(size=(4, 5))
P, T = R.uniform(0.1, 0.9, size=(4, 5)), R.uniform(0.05, 0.95, size=(4, 5))
S = np.array([1.0, -1.0, 1.0, -1.0])
A = R.normal(size=(4, 3))
TRIP = [A, A + 0.3 * R.normal(size=(4, 3)), A + R.normal(size=(4, 3))]


def _t(a):
    return tg.tensor(np.asarray(a))


CASES = [  # (our layer, the torch layer's constructor kwargs, inputs, the op's call)
    (nn.HuberLoss("sum", 0.7), ("HuberLoss", dict(reduction="sum", delta=0.7)), [X * 2, Y],
     lambda a, b: ops.huber_loss(a, b, "sum", 0.7)),
    (nn.BCELoss(weight=np.linspace(0.5, 2, 5), reduction="none"),
     ("BCELoss", dict(weight="W", reduction="none")), [P, T],
     lambda a, b: ops.binary_cross_entropy(a, b, np.linspace(0.5, 2, 5), "none")),
    (nn.KLDivLoss(reduction="batchmean", log_target=True),
     ("KLDivLoss", dict(reduction="batchmean", log_target=True)), [np.log(P), np.log(T)],
     lambda a, b: ops.kl_div(a, b, "batchmean", True)),
    (nn.MarginRankingLoss(0.3, reduction="sum"), ("MarginRankingLoss", dict(margin=0.3,
                                                                           reduction="sum")),
     [X[:, 0], Y[:, 0], S], lambda a, b, c: ops.margin_ranking_loss(a, b, c, 0.3, "sum")),
    (nn.CosineEmbeddingLoss(-0.2), ("CosineEmbeddingLoss", dict(margin=-0.2)), [X, Y, S],
     lambda a, b, c: ops.cosine_embedding_loss(a, b, c, -0.2)),
    (nn.TripletMarginLoss(1.5, 3, 1e-5, True, reduction="none"),
     ("TripletMarginLoss", dict(margin=1.5, p=3, eps=1e-5, swap=True, reduction="none")), TRIP,
     lambda a, b, c: ops.triplet_margin_loss(a, b, c, 1.5, 3, 1e-5, True, "none")),
    (nn.CosineSimilarity(dim=0, eps=1e-6), ("CosineSimilarity", dict(dim=0, eps=1e-6)), [X, Y],
     lambda a, b: ops.cosine_similarity(a, b, 0, 1e-6)),
]


@pytest.mark.parametrize("layer, torch_spec, inputs, op", CASES,
                         ids=[c[1][0] for c in CASES])
def test_layer_calls_its_op_and_has_torch_repr(layer, torch_spec, inputs, op):
    got = layer(*[_t(a) for a in inputs])
    np.testing.assert_array_equal(got.numpy(), op(*[_t(a) for a in inputs]).numpy())
    assert repr(layer) == f"{torch_spec[0]}()"  # torch's losses show no options


@pytest.mark.parametrize("layer, torch_spec, inputs, op", CASES,
                         ids=[c[1][0] for c in CASES])
def test_layer_matches_torch(layer, torch_spec, inputs, op):
    torch = pytest.importorskip("torch")
    name, kw = torch_spec
    kw = {k: torch.tensor(np.linspace(0.5, 2, 5)) if v == "W" else v for k, v in kw.items()}
    tl = getattr(torch.nn, name)(**kw)
    assert repr(tl) == repr(layer)
    tt = [torch.tensor(a, requires_grad=True) for a in inputs]
    ours = [tg.tensor(a, requires_grad=True) for a in inputs]
    tout, oout = tl(*tt), layer(*ours)
    np.testing.assert_allclose(oout.numpy(), tout.detach().numpy(), rtol=1e-10, atol=1e-12)
    tout.sum().backward()
    oout.sum().backward()
    for a, b in zip(ours, tt):
        if b.grad is not None:
            np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_defaults_attributes_and_buffers():
    t = nn.TripletMarginLoss()
    assert (t.margin, t.p, t.eps, t.swap, t.reduction) == (1.0, 2.0, 1e-6, False, "mean")
    assert (nn.CosineSimilarity().dim, nn.CosineSimilarity().eps) == (1, 1e-8)
    assert nn.HuberLoss().delta == 1.0 and nn.KLDivLoss().log_target is False
    bce = nn.BCELoss(weight=np.ones(5))
    assert "weight" in bce.state_dict() and nn.BCELoss().weight is None
    assert nn.CosineSimilarity(dim=1)(_t(X), _t(Y)).shape == (4,)


def test_errors_and_torch_positional_forms():
    with pytest.raises(ArgumentError, match="reduction must be one of"):
        nn.HuberLoss("avg")
    with pytest.raises(ArgumentError, match="batchmean"):
        nn.KLDivLoss(reduction="avg")
    for cls in (nn.MarginRankingLoss, nn.CosineEmbeddingLoss):
        with pytest.raises(ArgumentError, match="reduction"):
            cls(reduction="batchmean")
    # PyTorch's deprecated size_average/reduce come before reduction: keyword-only here
    with pytest.raises(TypeError):
        nn.BCELoss(None, "sum")
    with pytest.raises(TypeError):
        nn.MarginRankingLoss(0.1, "sum")
