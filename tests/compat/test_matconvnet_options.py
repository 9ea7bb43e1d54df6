"""simplenn's options, each against vl_simplenn's rules: conserve_memory (what is
emptied), back_prop_depth, accumulate, skip_forward, and their errors."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("scipy.io")

from matlab_files import lenet, save_v5, vgg_small  # noqa: E402

import tapegrad  # noqa: E402
from tapegrad import errors  # noqa: E402
from tapegrad.compat.matconvnet import load_simplenn, simplenn  # noqa: E402


@pytest.fixture
def rng():
    return np.random.default_rng(1)


@pytest.fixture
def lenet_net(tmp_path, rng):
    save_v5(tmp_path / "lenet.mat", layers=lenet(rng, np.float64, widths=(3, 4, 6)))
    net = load_simplenn(tmp_path / "lenet.mat")
    net.layers[-1].class_ = np.array([1, 4, 9, 10])
    return net


@pytest.fixture
def x(rng):
    return rng.standard_normal((28, 28, 1, 4))


def empty(res, what):
    return [i for i, r in enumerate(res) if getattr(r, what) is None]


def close(a, b):
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)


def test_conserve_memory_forward_only(lenet_net, x):
    full = simplenn(lenet_net, x)
    res = simplenn(lenet_net, x, conserve_memory=True)
    # every intermediate x goes; the input and the output stay
    assert empty(res, "x") == list(range(1, 8))
    close(res[-1].x, full[-1].x)
    np.testing.assert_array_equal(res[0].x, x)
    lenet_net.layers[2].precious = True  # keeps its output, res[3]
    assert empty(simplenn(lenet_net, x, conserve_memory=True), "x") == [1, 2, 4, 5, 6, 7]


def test_conserve_memory_backward_keeps_dzdw_input_and_output(lenet_net, x):
    full = simplenn(lenet_net, x, 1.0)
    res = simplenn(lenet_net, x, 1.0, conserve_memory=True)
    assert empty(res, "x") == empty(res, "dzdx") == list(range(1, 8))
    for i in (0, 2, 4, 6):  # the conv layers' weight derivatives all stay
        for a, b in zip(res[i].dzdw, full[i].dzdw):
            close(a, b)
    close(res[0].dzdx, full[0].dzdx)
    close(res[-1].x, full[-1].x)
    assert res[-1].dzdx == 1.0
    lenet_net.layers[5].precious = True
    res = simplenn(lenet_net, x, 1.0, conserve_memory=True)
    assert empty(res, "x") == empty(res, "dzdx") == [1, 2, 3, 4, 5, 7]
    close(res[6].dzdx, full[6].dzdx)


@pytest.mark.parametrize("depth", [1, 3, 5])
def test_back_prop_depth(lenet_net, x, depth):
    full = simplenn(lenet_net, x, 1.0)
    res = simplenn(lenet_net, x, 1.0, back_prop_depth=depth)
    lim = 8 - depth  # layers[lim:] back-propagate
    assert empty(res, "dzdx") == list(range(lim))
    for i in range(lim, 9):
        close(res[i].dzdx, full[i].dzdx)
    for i in (0, 2, 4, 6):
        if i < lim:
            assert res[i].dzdw is None
        else:
            for a, b in zip(res[i].dzdw, full[i].dzdw):
                close(a, b)
    # with conserve_memory the first back-propagating entry is emptied too
    res = simplenn(lenet_net, x, 1.0, back_prop_depth=depth, conserve_memory=True)
    assert empty(res, "dzdx") == list(range(8))
    assert res[0].x is not None
    assert simplenn(lenet_net, x, 1.0, back_prop_depth=100)[0].dzdx is not None
    with pytest.raises(errors.ArgumentError, match="back_prop_depth"):
        simplenn(lenet_net, x, 1.0, back_prop_depth=0)


def test_accumulate_sums_sub_batches(lenet_net, x):
    labels = lenet_net.layers[-1].class_
    full = simplenn(lenet_net, x, 1.0)
    lenet_net.layers[-1].class_ = labels[:2]
    res = simplenn(lenet_net, x[..., :2], 1.0)
    first = [list(r.dzdw) if r.dzdw else None for r in res]
    lenet_net.layers[-1].class_ = labels[2:]
    res = simplenn(lenet_net, x[..., 2:], 1.0, res=res, accumulate=True)
    second = simplenn(lenet_net, x[..., 2:], 1.0)
    for i in (0, 2, 4, 6):  # the loss sums over images: the halves add up to the batch
        for a, b, c, d in zip(res[i].dzdw, full[i].dzdw, first[i], second[i].dzdw):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-13)
            np.testing.assert_allclose(a, c + d, rtol=1e-12, atol=1e-14)
    # without accumulate the second call overwrites
    res = simplenn(lenet_net, x[..., 2:], 1.0, res=res)
    close(res[0].dzdw[0], second[0].dzdw[0])


def test_accumulate_bnorm_moments(tmp_path, rng):
    save_v5(tmp_path / "vgg.mat", layers=vgg_small(rng))
    net = load_simplenn(tmp_path / "vgg.mat")
    net.layers[-1].class_ = np.array([2, 3])
    xa, xb = rng.standard_normal((2, 9, 9, 3, 2))
    a = simplenn(net, xa, 1.0, mode="test")
    first = [d.copy() for d in a[4].dzdw]
    b = simplenn(net, xb, 1.0, mode="test")
    acc = simplenn(net, xb, 1.0, mode="test", res=a, accumulate=True)
    for j in range(3):  # G, B and the moments times N all add up
        np.testing.assert_allclose(acc[4].dzdw[j], first[j] + b[4].dzdw[j], rtol=1e-12)


def test_skip_forward_reuses_res(tmp_path, rng):
    save_v5(tmp_path / "vgg.mat", layers=vgg_small(rng))
    net = load_simplenn(tmp_path / "vgg.mat")
    net.layers[-1].class_ = np.array([2, 3])
    x = rng.standard_normal((9, 9, 3, 2))
    tapegrad.manual_seed(5)
    full = simplenn(net, x, 1.0)  # normal mode: dropout draws a mask
    tapegrad.manual_seed(5)
    res = simplenn(net, x)
    outputs = [r.x for r in res]
    mask = res[8].aux.copy()
    res = simplenn(net, None, 1.0, res=res, skip_forward=True)
    assert all(r.x is o for r, o in zip(res, outputs))  # nothing recomputed into res
    np.testing.assert_array_equal(res[8].aux, mask)
    for r, f in zip(res, full):
        close(r.dzdx, f.dzdx)
        for a, b in zip(r.dzdw or [], f.dzdw or []):
            close(a, b)
    # a ReLU whose input was freed back-propagates from its output (same mask)
    res[6].x = None  # the input of layers[6], a relu
    again = simplenn(net, None, 1.0, res=res, skip_forward=True)
    close(again[6].dzdx, full[6].dzdx)
    res[5].x = None  # the input of a conv: nothing can stand in for it
    with pytest.raises(errors.ArgumentError, match=r"res\[5\]\.x.*conv2"):
        simplenn(net, None, 1.0, res=res, skip_forward=True)
    with pytest.raises(errors.ArgumentError, match="needs the res"):
        simplenn(net, x, 1.0, skip_forward=True)
    with pytest.raises(errors.ArgumentError, match="only with dzdy"):
        simplenn(net, x, res=res, skip_forward=True)


def test_result_fields_and_errors(lenet_net, x):
    res = simplenn(lenet_net, x, 1.0)
    assert len(res) == 9 and all(r.time >= 0 and r.backwardTime >= 0 for r in res)
    assert res[2].time > 0 and res[2].backwardTime > 0 and res[-1].time == 0
    assert "dzdw={5x5x3x4, 1x4}" in repr(res[2])
    with pytest.raises(errors.ArgumentError, match="unknown mode"):
        simplenn(lenet_net, x, mode="train")
    with pytest.raises(errors.ArgumentError, match="res has 3 entries"):
        simplenn(lenet_net, x, res=res[:3])
    # the Module view trains: its Parameters get .grad from loss.backward()
    xt = tapegrad.tensor(x.transpose(3, 2, 0, 1))
    loss = lenet_net(xt)
    loss.backward()
    np.testing.assert_allclose(lenet_net.layers[2].weight.grad.numpy().transpose(2, 3, 1, 0),
                               res[2].dzdw[0], rtol=1e-10, atol=1e-14)


def test_missing_dependency_is_one_clear_line(tmp_path, rng, monkeypatch):
    from tapegrad.compat.matconvnet import MatFileDependencyError

    save_v5(tmp_path / "n.mat", layers=lenet(rng, widths=(2, 3, 4)))
    monkeypatch.setitem(sys.modules, "scipy.io", None)  # `import scipy.io` now fails
    with pytest.raises(MatFileDependencyError, match=r"needs scipy.*tapegrad\[matconvnet\]"):
        load_simplenn(tmp_path / "n.mat")
    assert issubclass(MatFileDependencyError, (errors.TapegradError, ImportError))
