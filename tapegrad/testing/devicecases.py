"""Layers, optimizers and a LeNet training step, run on the CPU and on a device.

The same cases serve the strict fake device on every CI run
(``tests/device/test_fake_device.py``) and a real GPU (the ``gpu``-marked
tests and ``benchmarks/gpu_check.sh``): each runs a module (built once on the
CPU and copied, so both devices start from the same weights), an optimizer
or a few training steps, and returns host copies of everything it produced,
after checking that each result lives on the device it ran on.

    for case in LAYER_CASES:
        compare_results(run_layer(case, "cpu"), run_layer(case, dev), rtol, atol)
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import nn, optim
from ..device import device_of_array, get_device, to_host
from ..random import manual_seed
from ..tensor import Tensor
from .devicecheck import DeviceMismatchError, cpu_reference

__all__ = ["LayerCase", "LAYER_CASES", "OPTIMIZER_CASES", "run_layer", "run_optimizer",
           "run_lenet_steps", "compare_results"]


@dataclass
class LayerCase:
    """``build()`` a module; call it on ``inputs(rng)`` (float arrays require grad)."""

    name: str
    build: Callable[[], nn.Module]
    inputs: Callable[[np.random.Generator], list]
    train: bool = True


def _f(*shape):
    return lambda r: [r.standard_normal(shape).astype(np.float32)]


def _pair(*shape):
    return lambda r: [r.standard_normal(shape).astype(np.float32),
                      r.standard_normal(shape).astype(np.float32)]


def _classes(n, c):
    return lambda r: [r.standard_normal((n, c)).astype(np.float32),
                      np.array([i % c for i in range(n)], dtype=np.int64)]


_ACTIVATIONS = ["ReLU", "LeakyReLU", "Sigmoid", "Tanh", "GELU", "SiLU", "ELU", "Softplus",
                "PReLU", "ReLU6", "Hardtanh", "Hardsigmoid", "Hardswish", "SELU", "Mish",
                "LogSigmoid", "Softsign", "Tanhshrink", "Identity", "Flatten"]

LAYER_CASES = [
    *(LayerCase(name, getattr(nn, name), _f(4, 6)) for name in _ACTIVATIONS),
    LayerCase("Softmax", lambda: nn.Softmax(dim=1), _f(4, 6)),
    LayerCase("LogSoftmax", lambda: nn.LogSoftmax(dim=1), _f(4, 6)),
    LayerCase("GLU", lambda: nn.GLU(dim=1), _f(4, 6)),
    LayerCase("Unflatten", lambda: nn.Unflatten(1, (2, 3)), _f(4, 6)),
    LayerCase("Linear", lambda: nn.Linear(5, 3), _f(4, 5)),
    LayerCase("Conv2d", lambda: nn.Conv2d(3, 4, 3, padding=1), _f(2, 3, 6, 6)),
    LayerCase("Conv2d strided, dilated",
              lambda: nn.Conv2d(3, 4, 3, stride=2, padding=2, dilation=2), _f(2, 3, 7, 7)),
    LayerCase("ConvTranspose2d", lambda: nn.ConvTranspose2d(3, 2, 3, stride=2), _f(2, 3, 4, 4)),
    LayerCase("MaxPool2d", lambda: nn.MaxPool2d(2), _f(2, 3, 6, 6)),
    LayerCase("MaxPool2d overlapping", lambda: nn.MaxPool2d(3, stride=2, padding=1),
              _f(2, 3, 7, 7)),
    LayerCase("AvgPool2d", lambda: nn.AvgPool2d(3, stride=2, padding=1), _f(2, 3, 6, 6)),
    LayerCase("AdaptiveAvgPool2d", lambda: nn.AdaptiveAvgPool2d((2, 3)), _f(2, 3, 5, 7)),
    LayerCase("AdaptiveMaxPool2d", lambda: nn.AdaptiveMaxPool2d(2), _f(2, 3, 5, 5)),
    LayerCase("BatchNorm1d", lambda: nn.BatchNorm1d(5), _f(4, 5)),
    LayerCase("BatchNorm2d", lambda: nn.BatchNorm2d(3), _f(4, 3, 3, 3)),
    LayerCase("BatchNorm2d eval", lambda: nn.BatchNorm2d(3), _f(4, 3, 3, 3), train=False),
    LayerCase("LayerNorm", lambda: nn.LayerNorm(5), _f(4, 3, 5)),
    LayerCase("GroupNorm", lambda: nn.GroupNorm(2, 4), _f(2, 4, 3, 3)),
    LayerCase("LocalResponseNorm", lambda: nn.LocalResponseNorm(3), _f(2, 4, 3, 3)),
    LayerCase("Dropout eval", lambda: nn.Dropout(0.5), _f(4, 6), train=False),
    LayerCase("Embedding", lambda: nn.Embedding(10, 3),
              lambda r: [np.array([[1, 2, 9], [0, 2, 2]], dtype=np.int64)]),
    LayerCase("Upsample nearest", lambda: nn.Upsample(scale_factor=2), _f(1, 2, 3, 3)),
    LayerCase("Upsample bilinear", lambda: nn.Upsample(scale_factor=2, mode="bilinear"),
              _f(1, 2, 3, 3)),
    LayerCase("PixelShuffle", lambda: nn.PixelShuffle(2), _f(1, 8, 2, 3)),
    LayerCase("PixelUnshuffle", lambda: nn.PixelUnshuffle(2), _f(1, 2, 4, 6)),
    LayerCase("CrossEntropyLoss", nn.CrossEntropyLoss, _classes(6, 4)),
    LayerCase("CrossEntropyLoss weighted, smoothed",
              lambda: nn.CrossEntropyLoss(weight=Tensor(np.array([1.0, 2.0, 0.5, 1.0],
                                                                 np.float32)),
                                          label_smoothing=0.1, ignore_index=1),
              _classes(6, 4)),
    LayerCase("NLLLoss", nn.NLLLoss, _classes(6, 4)),
    LayerCase("MSELoss", nn.MSELoss, _pair(4, 3)),
    LayerCase("L1Loss", nn.L1Loss, _pair(4, 3)),
    LayerCase("SmoothL1Loss", nn.SmoothL1Loss, _pair(4, 3)),
    LayerCase("HuberLoss", nn.HuberLoss, _pair(4, 3)),
    LayerCase("BCEWithLogitsLoss", nn.BCEWithLogitsLoss,
              lambda r: [r.standard_normal((4, 3)).astype(np.float32),
                         r.uniform(0, 1, (4, 3)).astype(np.float32)]),
    LayerCase("BCELoss", nn.BCELoss,
              lambda r: [r.uniform(0.1, 0.9, (4, 3)).astype(np.float32),
                         r.uniform(0, 1, (4, 3)).astype(np.float32)]),
    LayerCase("KLDivLoss", lambda: nn.KLDivLoss(reduction="batchmean"),
              lambda r: [np.log(r.uniform(0.1, 0.9, (4, 3))).astype(np.float32),
                         r.uniform(0.1, 0.9, (4, 3)).astype(np.float32)]),
    LayerCase("MarginRankingLoss", lambda: nn.MarginRankingLoss(0.1),
              lambda r: [r.standard_normal(5).astype(np.float32),
                         r.standard_normal(5).astype(np.float32),
                         np.array([1, -1, 1, 1, -1], dtype=np.float32)]),
    LayerCase("CosineEmbeddingLoss", lambda: nn.CosineEmbeddingLoss(0.2),
              lambda r: [r.standard_normal((4, 3)).astype(np.float32),
                         r.standard_normal((4, 3)).astype(np.float32),
                         np.array([1, -1, 1, -1], dtype=np.float32)]),
    LayerCase("TripletMarginLoss", nn.TripletMarginLoss,
              lambda r: [r.standard_normal((4, 3)).astype(np.float32) for _ in range(3)]),
    LayerCase("CosineSimilarity", nn.CosineSimilarity, _pair(4, 3)),
]


def _check_on(dev, label, arr):
    if device_of_array(arr) is not dev:
        raise DeviceMismatchError(f"{label} is on {device_of_array(arr)}, not on {dev}")
    return to_host(arr)


@cpu_reference
def run_layer(case: LayerCase, device) -> dict[str, np.ndarray]:
    """Outputs, input and parameter gradients and the state after one forward
    and backward of ``case`` on ``device``, as host arrays."""
    dev = get_device(device)
    manual_seed(0)
    module = copy.deepcopy(_built(case)).to(dev)
    module.train(case.train)
    rng = np.random.default_rng(0)
    xs = [Tensor(a, device=dev, requires_grad=a.dtype.kind == "f" and i < 2)
          for i, a in enumerate(case.inputs(rng))]
    out = module(*xs)
    outs = out if isinstance(out, tuple) else (out,)
    res = {}
    loss = None
    for k, o in enumerate(outs):
        res[f"output {k}"] = _check_on(dev, f"{case.name} output {k}", o.array)
        if o.requires_grad:
            w = Tensor(np.random.default_rng(k + 1).standard_normal(o.shape), dtype=o.dtype,
                       device=dev)
            term = (o * w).sum()
            loss = term if loss is None else loss + term
    if loss is not None:
        loss.backward()
    for i, x in enumerate(xs):
        if x.grad is not None:
            res[f"grad input {i}"] = _check_on(dev, f"{case.name} input {i} gradient",
                                               x.grad.array)
    for name, p in module.named_parameters():
        if p.grad is not None:
            res[f"grad {name}"] = _check_on(dev, f"{case.name} {name} gradient", p.grad.array)
    for name, t in module.state_dict().items():
        res[f"state {name}"] = _check_on(dev, f"{case.name} {name}", t.array)
    return res


_BUILT: dict = {}


def _built(case):
    """One CPU instance per case, so every device copies the same weights."""
    if case.name not in _BUILT:
        manual_seed(0)
        _BUILT[case.name] = case.build()
    return _BUILT[case.name]


OPTIMIZER_CASES = {
    "SGD": lambda ps: optim.SGD(ps, lr=0.1),
    "SGD momentum nesterov wd": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True,
                                                      weight_decay=1e-2),
    "SGD momentum dampening": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1),
    "Adam": lambda ps: optim.Adam(ps, lr=1e-2),
    "Adam amsgrad wd": lambda ps: optim.Adam(ps, lr=1e-2, amsgrad=True, weight_decay=1e-2),
    "AdamW": lambda ps: optim.AdamW(ps, lr=1e-2),
    "AdamW amsgrad": lambda ps: optim.AdamW(ps, lr=1e-2, amsgrad=True),
    "RMSprop": lambda ps: optim.RMSprop(ps, lr=1e-2),
    "RMSprop centered momentum wd": lambda ps: optim.RMSprop(ps, lr=1e-2, momentum=0.9,
                                                             centered=True, weight_decay=1e-2),
    "Adadelta": lambda ps: optim.Adadelta(ps, lr=1.0, weight_decay=1e-2),
}


def run_optimizer(name: str, device, steps: int = 3, dtype=np.float32) -> dict[str, np.ndarray]:
    """Parameters and optimizer state after ``steps`` updates with fixed
    gradients, on ``device``."""
    dev = get_device(device)
    rng = np.random.default_rng(0)
    params = [nn.Parameter(Tensor(rng.standard_normal(s).astype(dtype), device=dev))
              for s in ((3, 4), (4,))]
    opt = OPTIMIZER_CASES[name](params)
    for _ in range(steps):
        for p in params:
            p.grad = Tensor(rng.standard_normal(p.shape).astype(dtype), device=dev)
        opt.step()
    res = {f"param {i}": _check_on(dev, f"{name} param {i}", p.array)
           for i, p in enumerate(params)}
    for i, p in enumerate(params):
        for key, v in opt.state.get(p, {}).items():
            if hasattr(v, "shape") and not isinstance(v, (int, float)):
                arr = v.array if isinstance(v, Tensor) else v
                if getattr(arr, "ndim", 0):
                    res[f"state {i} {key}"] = _check_on(dev, f"{name} state {key}", arr)
    return res


@cpu_reference
def run_lenet_steps(device, steps: int = 2, batch: int = 16, model: str = "lenet",
                    data: str = "mnist", optimizer: str = "sgd") -> dict[str, np.ndarray]:
    """Losses and final weights after ``steps`` training steps of ``model``
    (Caffe's LeNet on 28x28 images by default) on fixed random batches."""
    from ..cli.models import DATA_SHAPES, build_model

    dev = get_device(device)
    key = ("lenet", model, data)
    if key not in _BUILT:
        manual_seed(0)
        _BUILT[key] = build_model(model, data)
    net = copy.deepcopy(_BUILT[key]).to(dev)
    for m in net.modules():
        if isinstance(m, nn.Dropout):  # random masks differ by device: off for the comparison
            m.p = 0.0
    opt = (optim.SGD(net.parameters(), lr=0.05, momentum=0.9) if optimizer == "sgd"
           else optim.Adam(net.parameters(), lr=1e-3))
    loss_fn = nn.CrossEntropyLoss()
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        x = Tensor(rng.uniform(0, 1, (batch, *DATA_SHAPES[data])).astype(np.float32), device=dev)
        y = Tensor(rng.integers(0, 10, batch), device=dev)
        opt.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    res = {"losses": np.array(losses)}
    for name, t in net.state_dict().items():
        res[name] = _check_on(dev, f"{model} {name}", t.array)
    return res


def compare_results(ref: dict, got: dict, rtol: float, atol: float, what: str = "") -> None:
    """Raise DeviceMismatchError unless ``got`` has ``ref``'s keys, shapes and
    values (within ``rtol``/``atol``)."""
    if set(ref) != set(got):
        raise DeviceMismatchError(f"{what}: results {sorted(got)} differ from the CPU's "
                                  f"{sorted(ref)}")
    for k, r in ref.items():
        g = got[k]
        if r.shape != g.shape or r.dtype != g.dtype:
            raise DeviceMismatchError(f"{what}: {k} is {g.shape} {g.dtype} on the device, "
                                      f"{r.shape} {r.dtype} on cpu")
        if not np.allclose(g, r, rtol=rtol, atol=atol, equal_nan=True):
            err = float(np.max(np.abs(g.astype(np.float64) - r))) if r.size else 0.0
            raise DeviceMismatchError(f"{what}: {k} differs from the CPU's (max abs "
                                      f"difference {err:.3g}; rtol {rtol}, atol {atol})")
