"""The models ``tapegrad train --model NAME`` builds, per dataset.

- ``lenet`` on MNIST is Caffe's LeNet exactly (examples/mnist/lenet.prototxt):
  conv 20@5x5 -> max pool 2 -> conv 50@5x5 -> max pool 2 -> inner product 500
  -> ReLU -> inner product 10 (-> softmax loss). On the 8x8 digits, a
  LeNet-style CNN that fits the small images: conv 32@5x5 pad 2 -> BN -> ReLU
  -> pool -> conv 64@3x3 pad 1 -> BN -> ReLU -> pool -> dropout 0.25 -> fc 128
  -> ReLU -> fc 10 (batch norm and dropout buy about one point of accuracy
  over the plain version on this small dataset).
- ``mlp``: flatten -> 256 -> ReLU -> 128 -> ReLU -> 10.
- ``convnet``: a small VGG-style net with batch norm and dropout.
"""

from __future__ import annotations

from ..errors import ArgumentError

__all__ = ["MODELS", "DATA_SHAPES", "build_model", "count_parameters"]

MODELS = ("lenet", "mlp", "convnet")
DATA_SHAPES = {"digits": (1, 8, 8), "mnist": (1, 28, 28)}
N_CLASSES = 10


def _lenet(nn, data):
    if data == "mnist":  # Caffe's LeNet, layer for layer
        return nn.Sequential(
            nn.Conv2d(1, 20, 5), nn.MaxPool2d(2),         # (N,1,28,28) -> (N,20,12,12)
            nn.Conv2d(20, 50, 5), nn.MaxPool2d(2),        # -> (N,50,4,4)
            nn.Flatten(), nn.Linear(800, 500), nn.ReLU(),
            nn.Linear(500, N_CLASSES),
        )
    c, h, w = DATA_SHAPES[data]
    return nn.Sequential(
        nn.Conv2d(c, 32, 5, padding=2), nn.BatchNorm2d(32), nn.ReLU(),
        nn.MaxPool2d(2),                                          # (N,1,8,8) -> (N,32,4,4)
        nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(),
        nn.MaxPool2d(2),                                          # -> (N,64,2,2)
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(64 * (h // 4) * (w // 4), 128), nn.ReLU(),
        nn.Linear(128, N_CLASSES),
    )


def _mlp(nn, data):
    c, h, w = DATA_SHAPES[data]
    return nn.Sequential(
        nn.Flatten(), nn.Linear(c * h * w, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
        nn.Linear(128, N_CLASSES),
    )


def _convnet(nn, data):
    c, h, w = DATA_SHAPES[data]

    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.Conv2d(cout, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU(),
                nn.MaxPool2d(2)]

    return nn.Sequential(
        *block(c, 32), *block(32, 64),                  # (N,c,h,w) -> (N,64,h/4,w/4)
        nn.Flatten(), nn.Dropout(0.5), nn.Linear(64 * (h // 4) * (w // 4), 256), nn.ReLU(),
        nn.Linear(256, N_CLASSES),
    )


_BUILDERS = {"lenet": _lenet, "mlp": _mlp, "convnet": _convnet}


def build_model(name: str, data: str):
    """A fresh model ``name`` for images of dataset ``data`` (weights from the
    global generator: call ``tapegrad.manual_seed`` first for repeatability)."""
    from .. import nn

    if name not in _BUILDERS:
        raise ArgumentError(f"unknown model {name!r}: choose one of {', '.join(MODELS)}")
    if data not in DATA_SHAPES:
        raise ArgumentError(f"unknown dataset {data!r}: choose one of "
                            f"{', '.join(DATA_SHAPES)}")
    return _BUILDERS[name](nn, data)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
