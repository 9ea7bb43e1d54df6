"""nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d, nn.Upsample, nn.PixelShuffle,
nn.PixelUnshuffle and their F.* functions: each layer is its op, reprs and
errors as PyTorch's, and torch.nn itself (values and gradients) when installed."""

import numpy as np
import pytest

import tapegrad as tg
import tapegrad.nn.functional as F
from tapegrad import nn, ops
from tapegrad.errors import ArgumentError, ShapeError


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


# (our layer, its op, the repr, PyTorch's layer from the torch module)
LAYERS = [
    (lambda: nn.AdaptiveAvgPool2d((3, None)), lambda x: ops.adaptive_avg_pool2d(x, (3, None)),
     "AdaptiveAvgPool2d(output_size=(3, None))", lambda t: t.nn.AdaptiveAvgPool2d((3, None))),
    (lambda: nn.AdaptiveMaxPool2d(2), lambda x: ops.adaptive_max_pool2d(x, 2),
     "AdaptiveMaxPool2d(output_size=2)", lambda t: t.nn.AdaptiveMaxPool2d(2)),
    (lambda: nn.Upsample(scale_factor=2), lambda x: ops.interpolate(x, scale_factor=2),
     "Upsample(scale_factor=2.0, mode='nearest')", lambda t: t.nn.Upsample(scale_factor=2)),
    (lambda: nn.Upsample(size=(5, 9), mode="bilinear", align_corners=True),
     lambda x: ops.interpolate(x, (5, 9), mode="bilinear", align_corners=True),
     "Upsample(size=(5, 9), mode='bilinear')",
     lambda t: t.nn.Upsample(size=(5, 9), mode="bilinear", align_corners=True)),
    (lambda: nn.Upsample(scale_factor=(1.5, 2), mode="bilinear", recompute_scale_factor=True),
     lambda x: ops.interpolate(x, scale_factor=(1.5, 2), mode="bilinear",
                               recompute_scale_factor=True),
     "Upsample(scale_factor=(1.5, 2.0), mode='bilinear')",
     lambda t: t.nn.Upsample(scale_factor=(1.5, 2), mode="bilinear",
                             recompute_scale_factor=True)),
    (lambda: nn.Upsample(scale_factor=1.7, mode="nearest-exact"),
     lambda x: ops.interpolate(x, scale_factor=1.7, mode="nearest-exact"),
     "Upsample(scale_factor=1.7, mode='nearest-exact')",
     lambda t: t.nn.Upsample(scale_factor=1.7, mode="nearest-exact")),
    (lambda: nn.Upsample(size=3, mode="area"), lambda x: ops.interpolate(x, 3, mode="area"),
     "Upsample(size=3, mode='area')", lambda t: t.nn.Upsample(size=3, mode="area")),
    (lambda: nn.PixelShuffle(2), lambda x: ops.pixel_shuffle(x, 2),
     "PixelShuffle(upscale_factor=2)", lambda t: t.nn.PixelShuffle(2)),
    (lambda: nn.PixelUnshuffle(2), lambda x: ops.pixel_unshuffle(x, 2),
     "PixelUnshuffle(downscale_factor=2)", lambda t: t.nn.PixelUnshuffle(2)),
]
IDS = [t for _, _, t, _ in LAYERS]


@pytest.mark.parametrize("make, op, text, _", LAYERS, ids=IDS)
def test_layer_is_its_op_with_pytorchs_repr(make, op, text, _):
    layer = make()
    assert repr(layer) == text
    assert not list(layer.parameters()) and not layer.state_dict()
    x = tg.tensor(_x(2, 4, 6, 4), requires_grad=True)
    y = layer(x)
    np.testing.assert_array_equal(y.numpy(), op(tg.tensor(x.numpy())).numpy())
    y.sum().backward()
    assert x.grad.shape == x.shape


def test_adaptive_max_pool_layer_returns_indices():
    x = tg.tensor(_x(1, 2, 5, 5))
    y, idx = nn.AdaptiveMaxPool2d((2, 3), return_indices=True)(x)
    ref, ref_idx = ops.adaptive_max_pool2d(x, (2, 3), return_indices=True)
    np.testing.assert_array_equal(y.numpy(), ref.numpy())
    np.testing.assert_array_equal(idx.numpy(), ref_idx.numpy())


def test_layers_in_a_model():
    tg.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.PixelUnshuffle(2),
                          nn.Conv2d(32, 12, 1), nn.PixelShuffle(2),
                          nn.Upsample(scale_factor=2, mode="bilinear"),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten())
    x = tg.randn(2, 3, 4, 6)
    out = model(x)
    assert out.shape == (2, 3)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_upsample_checks_its_options_when_built():
    with pytest.raises(ArgumentError, match="Upsample: mode 'bicubic' is not implemented"):
        nn.Upsample(scale_factor=2, mode="bicubic")
    with pytest.raises(ArgumentError, match="Upsample: align_corners can only be set"):
        nn.Upsample(scale_factor=2, align_corners=True)
    with pytest.raises(ArgumentError, match="Upsample: give exactly one of size and scale_factor"):
        nn.Upsample()
    with pytest.raises(ArgumentError, match="Upsample: scale_factor must be a positive number"):
        nn.Upsample(scale_factor=-1)
    with pytest.raises(ArgumentError, match="Upsample: recompute_scale_factor is not meaningful"):
        nn.Upsample(size=4, recompute_scale_factor=True)


def test_layers_raise_the_ops_errors_at_forward():
    with pytest.raises(ShapeError, match="pixel_shuffle: the channel axis"):
        nn.PixelShuffle(2)(tg.zeros(1, 3, 2, 2))
    with pytest.raises(ArgumentError, match="pixel_unshuffle: downscale_factor must be"):
        nn.PixelUnshuffle(0)(tg.zeros(1, 1, 2, 2))
    with pytest.raises(ArgumentError, match="adaptive_avg_pool2d: output_size must be"):
        nn.AdaptiveAvgPool2d(None)(tg.zeros(1, 1, 2, 2))
    with pytest.raises(ArgumentError, match=r"interpolate: 3-D input"):
        nn.Upsample(scale_factor=2)(tg.zeros(1, 2, 4))


def test_functional_names_take_pytorchs_keywords():
    x = tg.tensor(_x(1, 4, 4, 6))
    for f in ("adaptive_avg_pool2d", "adaptive_max_pool2d", "interpolate", "pixel_shuffle",
              "pixel_unshuffle"):
        assert f in F.__all__ and getattr(F, f) is getattr(ops, f)
    cases = [
        (F.adaptive_avg_pool2d(input=x, output_size=2), ops.adaptive_avg_pool2d(x, 2)),
        (F.adaptive_max_pool2d(input=x, output_size=(1, 3)), ops.adaptive_max_pool2d(x, (1, 3))),
        (F.interpolate(input=x, scale_factor=0.5, mode="bilinear", align_corners=False),
         ops.interpolate(x, scale_factor=0.5, mode="bilinear")),
        (F.pixel_shuffle(input=x, upscale_factor=2), ops.pixel_shuffle(x, 2)),
        (F.pixel_unshuffle(input=x, downscale_factor=2), ops.pixel_unshuffle(x, 2)),
    ]
    for got, expected in cases:
        np.testing.assert_array_equal(got.numpy(), expected.numpy())


@pytest.mark.parametrize("make, _, text, make_theirs", LAYERS, ids=IDS)
def test_against_torch_nn(make, _, text, make_theirs):
    torch = pytest.importorskip("torch")
    theirs = make_theirs(torch)
    assert repr(theirs) == text
    for shape in [(2, 4, 6, 4), (1, 8, 5, 8)]:
        x = _x(*shape, seed=1)
        if "Unshuffle" in text and shape[2] % 2:
            continue
        a, b = tg.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
        ya, yb = make()(a), theirs(b)
        np.testing.assert_allclose(ya.numpy(), yb.detach().numpy(), rtol=1e-12, atol=1e-12)
        g = _x(*ya.shape, seed=2)
        ya.backward(tg.tensor(g))
        yb.backward(torch.tensor(g))
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-12, atol=1e-12)
