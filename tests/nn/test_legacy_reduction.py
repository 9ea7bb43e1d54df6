"""PyTorch's deprecated ``size_average``/``reduce`` on every loss, functional and
layer (tapegrad.args.legacy_reduction): the reduction they give, in PyTorch's
positions, with PyTorch's warning; against torch where it is installed."""

import inspect
import itertools
import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, ops
from tapegrad.errors import ArgumentTypeError, ShapeError

_R = np.random.default_rng(0)
_X, _Y = _R.normal(size=(3, 4)), _R.normal(size=(3, 4))
_P, _T = _R.uniform(0.05, 0.95, (3, 4)), _R.uniform(0, 1, (3, 4))
_LOGITS, _LABELS = _R.normal(size=(3, 5)), np.array([0, 4, 2])
_LOGP = _LOGITS - np.log(np.exp(_LOGITS).sum(1, keepdims=True))
_S4, _S3 = np.array([1.0, -1.0, -1.0, 1.0]), np.array([1.0, -1.0, 1.0])

# name -> (its tensor inputs, the op at a given reduction: the answer to compare with)
LOSSES = {
    "mse_loss": ([_X, _Y], lambda r, a, b: ops.mse_loss(a, b, r)),
    "l1_loss": ([_X, _Y], lambda r, a, b: ops.l1_loss(a, b, r)),
    "smooth_l1_loss": ([_X, _Y], lambda r, a, b: ops.smooth_l1_loss(a, b, r)),
    "binary_cross_entropy": ([_P, _T], lambda r, a, b: ops.binary_cross_entropy(a, b, None, r)),
    "binary_cross_entropy_with_logits": (
        [_X, _T], lambda r, a, b: ops.binary_cross_entropy_with_logits(a, b, reduction=r)),
    "kl_div": ([_LOGP, np.exp(_LOGP)], lambda r, a, b: ops.kl_div(a, b, r)),
    "cross_entropy": ([_LOGITS, _LABELS], lambda r, a, b: ops.cross_entropy(a, b, reduction=r)),
    "nll_loss": ([_LOGP, _LABELS], lambda r, a, b: ops.nll_loss(a, b, reduction=r)),
    "margin_ranking_loss": ([_X[0], _Y[0], _S4],
                            lambda r, a, b, y: ops.margin_ranking_loss(a, b, y, 0.0, r)),
    "cosine_embedding_loss": ([_X, _Y, _S3],
                              lambda r, a, b, y: ops.cosine_embedding_loss(a, b, y, 0.0, r)),
    "triplet_margin_loss": ([_X, _Y, _X[::-1].copy()],
                            lambda r, a, p, n: ops.triplet_margin_loss(a, p, n, reduction=r)),
}
LAYERS = {"MSELoss": "mse_loss", "L1Loss": "l1_loss", "SmoothL1Loss": "smooth_l1_loss",
          "BCELoss": "binary_cross_entropy",
          "BCEWithLogitsLoss": "binary_cross_entropy_with_logits", "KLDivLoss": "kl_div",
          "CrossEntropyLoss": "cross_entropy", "NLLLoss": "nll_loss",
          "MarginRankingLoss": "margin_ranking_loss",
          "CosineEmbeddingLoss": "cosine_embedding_loss",
          "TripletMarginLoss": "triplet_margin_loss"}
FLAGS = (None, True, False)
MESSAGE = "size_average and reduce args will be deprecated, please use reduction='{}' instead."


def _expected(size_average, reduce, reduction):
    """torch/nn/_reduction.py legacy_get_string, written out."""
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def _tensors(name, lib=tg):
    arrays = LOSSES[name][0]
    if lib is tg:
        return [tg.tensor(a) for a in arrays]
    return [lib.tensor(a) for a in arrays]


def _call_warned(fn, *args, **kwargs):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*args, **kwargs)
    return out, caught


def _check_warning(caught, size_average, reduce, want):
    if size_average is None and reduce is None:
        assert not [w for w in caught if "size_average" in str(w.message)]
        return
    ours = [w for w in caught if "size_average" in str(w.message)]
    assert [str(w.message) for w in ours] == [MESSAGE.format(want)]
    assert ours[0].category is UserWarning
    assert ours[0].filename == __file__  # it points at the caller's line


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("size_average,reduce", list(itertools.product(FLAGS, FLAGS)))
def test_functional_maps_them_as_pytorch(name, size_average, reduce):
    xs = _tensors(name)
    given_reduction = "sum" if name != "kl_div" else "batchmean"
    want = _expected(size_average, reduce, given_reduction)
    out, caught = _call_warned(getattr(F, name), *xs, size_average=size_average, reduce=reduce,
                               reduction=given_reduction)
    _check_warning(caught, size_average, reduce, want)
    if want == "batchmean":
        ref = LOSSES[name][1]("sum", *xs) / xs[0].shape[0]
    else:
        ref = LOSSES[name][1](want, *xs)
        if name == "kl_div" and want != given_reduction:  # PyTorch: batchmean still divides
            ref = ref / xs[0].shape[0]
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-12)
    assert out.shape == (() if want != "none" else ref.shape)


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("size_average,reduce", list(itertools.product(FLAGS, FLAGS)))
def test_layers_map_them_as_pytorch(layer, size_average, reduce):
    name = LAYERS[layer]
    xs = _tensors(name)
    module, caught = _call_warned(getattr(nn, layer), size_average=size_average, reduce=reduce,
                                  reduction="sum")
    want = _expected(size_average, reduce, "sum")
    _check_warning(caught, size_average, reduce, want)
    assert module.reduction == want
    np.testing.assert_allclose(module(*xs).numpy(), LOSSES[name][1](want, *xs).numpy(),
                               rtol=1e-12)


def _positional(signature, n_inputs, size_average, reduce):
    """Every argument from the first after the inputs through ``reduce``, by
    position: the legacy flags where they are, PyTorch's defaults elsewhere."""
    out = []
    for p in list(signature.parameters.values())[n_inputs:]:
        out.append(size_average if p.name == "size_average" else
                   reduce if p.name == "reduce" else p.default)
        if p.name == "reduce":
            return out
    raise AssertionError(f"no reduce in {signature}")


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_functional_positions_are_pytorchs(name):
    torch = pytest.importorskip("torch")
    tf = getattr(torch.nn.functional, name)
    for size_average, reduce in itertools.product(FLAGS, FLAGS):
        args = _positional(inspect.signature(tf), len(LOSSES[name][0]), size_average, reduce)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = getattr(F, name)(*_tensors(name), *args)
            theirs = tf(*_tensors(name, torch), *args)
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12,
                                   err_msg=f"{name}{tuple(args)}")


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_layer_positions_are_pytorchs(layer):
    torch = pytest.importorskip("torch")
    cls = getattr(torch.nn, layer)
    for size_average, reduce in itertools.product(FLAGS, FLAGS):
        args = _positional(inspect.signature(cls.__init__), 1, size_average, reduce)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours, theirs = getattr(nn, layer)(*args), cls(*args)
            name = LAYERS[layer]
            got, want = ours(*_tensors(name)), theirs(*_tensors(name, torch))
        assert ours.reduction == theirs.reduction, (layer, args)
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-10, atol=1e-12)


def test_kl_div_batchmean_with_the_flags_as_pytorch():
    torch = pytest.importorskip("torch")
    for size_average, reduce in itertools.product(FLAGS, FLAGS):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = F.kl_div(*_tensors("kl_div"), size_average, reduce, "batchmean")
            theirs = torch.nn.functional.kl_div(*_tensors("kl_div", torch), size_average,
                                                reduce, "batchmean")
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12)


def test_a_reduction_in_a_flags_place_is_refused():
    x, y = _tensors("mse_loss")
    with pytest.raises(ArgumentTypeError, match=r"mse_loss: size_average .*got 'sum'.* by name"):
        F.mse_loss(x, y, "sum")
    with pytest.raises(ArgumentTypeError, match=r"MSELoss: size_average .*got 'sum'"):
        nn.MSELoss("sum")
    with pytest.raises(ArgumentTypeError, match=r"CrossEntropyLoss: reduce .*got 'none'"):
        nn.CrossEntropyLoss(None, None, -100, "none")
    with pytest.raises(TypeError, match="unexpected keyword"):
        nn.MSELoss(beta=1.0)


@given(hs.sampled_from(["mse_loss", "l1_loss"]), hs.sampled_from(["mean", "sum", "none"]),
       hs.sampled_from(FLAGS), hs.sampled_from(FLAGS))
def test_weighted_mse_and_l1_as_pytorch_2_13(name, reduction, size_average, reduce):
    w = np.random.default_rng(3).uniform(0.1, 2.0, _X.shape)
    a = tg.tensor(_X, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = getattr(F, name)(a, tg.tensor(_Y), size_average, reduce, reduction, tg.tensor(w))
    r = _expected(size_average, reduce, reduction)
    err = (_X - _Y) ** 2 if name == "mse_loss" else np.abs(_X - _Y)
    want = {"none": err * w, "sum": (err * w).sum(), "mean": (err * w).sum() / w.sum()}[r]
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12)
    out.sum().backward()
    torch = pytest.importorskip("torch")
    b = torch.tensor(_X, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = getattr(torch.nn.functional, name)(b, torch.tensor(_Y), size_average, reduce,
                                                 reduction, torch.tensor(w))
    ref.sum().backward()
    np.testing.assert_allclose(out.numpy(), ref.detach().numpy(), rtol=1e-12)
    np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12)


def test_weight_must_have_the_inputs_shape():
    x, y = _tensors("mse_loss")
    with pytest.raises(ShapeError, match=r"mse_loss: weight \(4,\) float64 must have the "
                                         r"input's shape \(3, 4\)"):
        F.mse_loss(x, y, weight=tg.ones(4, dtype=np.float64))
