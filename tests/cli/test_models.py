"""The models `tapegrad train` builds."""

import numpy as np
import pytest

import tapegrad
from tapegrad.cli.models import DATA_SHAPES, MODELS, build_model, count_parameters
from tapegrad.errors import ArgumentError


@pytest.mark.parametrize("data", sorted(DATA_SHAPES))
@pytest.mark.parametrize("name", MODELS)
def test_models_map_images_to_10_logits(name, data):
    tapegrad.manual_seed(0)
    model = build_model(name, data)
    model.eval()
    x = tapegrad.tensor(np.zeros((3, *DATA_SHAPES[data]), np.float32))
    with tapegrad.no_grad():
        y = model(x)
    assert y.shape == (3, 10) and y.dtype == np.float32


def test_mnist_lenet_is_caffes():
    model = build_model("lenet", "mnist")
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert shapes == [(20, 1, 5, 5), (20,), (50, 20, 5, 5), (50,), (500, 800), (500,),
                      (10, 500), (10,)]
    assert count_parameters(model) == 431_080
    kinds = [type(m).__name__ for m in model]
    assert kinds == ["Conv2d", "MaxPool2d", "Conv2d", "MaxPool2d", "Flatten", "Linear", "ReLU",
                     "Linear"]


def test_unknown_model():
    with pytest.raises(ArgumentError, match="unknown model"):
        build_model("resnet", "digits")
