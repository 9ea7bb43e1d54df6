"""Layers and models on an empty batch: PyTorch gives correctly shaped empty
results and zero gradients of the parameters' shapes; so must we."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, ops
from tapegrad.cli.models import DATA_SHAPES, build_model


def _check_empty_batch(model, in_shape, out_shape):
    x = tg.tensor(np.zeros(in_shape, np.float32), requires_grad=True)
    y = model(x)
    assert y.shape == out_shape and y.dtype == np.float32
    ops.sum(y).backward()
    assert x.grad is not None and x.grad.shape == x.shape
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
        np.testing.assert_array_equal(p.grad.numpy(), 0.0, err_msg=name)


@pytest.mark.parametrize("make,in_shape,out_shape", [
    (lambda: nn.Conv2d(3, 4, 3), (0, 3, 8, 8), (0, 4, 6, 6)),
    (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), (0, 4, 7, 7), (0, 6, 4, 4)),
    (lambda: nn.ConvTranspose2d(4, 2, 4, stride=2, padding=1), (0, 4, 5, 5), (0, 2, 10, 10)),
    (lambda: nn.MaxPool2d(2), (0, 3, 8, 8), (0, 3, 4, 4)),
    (lambda: nn.MaxPool2d(3, 2, 1, ceil_mode=True), (0, 3, 8, 8), (0, 3, 5, 5)),
    (lambda: nn.AvgPool2d(3, 2, 1), (0, 3, 8, 8), (0, 3, 4, 4)),
    (lambda: nn.Dropout(0.5), (0, 3, 8, 8), (0, 3, 8, 8)),
    (lambda: nn.Sequential(nn.ReLU(), nn.LeakyReLU(0.1), nn.Sigmoid(), nn.Tanh()),
     (0, 3), (0, 3)),
    (lambda: nn.Softmax(1), (0, 3), (0, 3)),
    (lambda: nn.LogSoftmax(1), (0, 3), (0, 3)),
])
def test_layers_on_an_empty_batch(make, in_shape, out_shape):
    tg.manual_seed(0)
    _check_empty_batch(make().train(), in_shape, out_shape)


@pytest.mark.parametrize("data", ["digits", "mnist"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_cli_lenet_on_an_empty_batch(data, mode):
    tg.manual_seed(0)
    model = build_model("lenet", data)
    getattr(model, mode)()
    buffers = {k: v.numpy().copy() for k, v in model.state_dict().items()
               if "running" in k}
    _check_empty_batch(model, (0,) + DATA_SHAPES[data], (0, 10))
    # an empty batch carries no statistics: batch norm's running estimates are kept
    for k, v in buffers.items():
        np.testing.assert_array_equal(model.state_dict()[k].numpy(), v, err_msg=k)
