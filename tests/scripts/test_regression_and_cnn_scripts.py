"""Two public PyTorch scripts, run under torch and under tapegrad, step by step.

* pytorch/examples regression/main.py (fits a random degree-4 polynomial with
  nn.Linear, F.smooth_l1_loss and a hand-written SGD step);
* yunjey/pytorch-tutorial tutorials/02-intermediate/convolutional_neural_network/main.py
  (two conv-bn-relu-maxpool blocks, nn.CrossEntropyLoss, optim.Adam, eval accuracy).

Each is copied faithfully below, with ``torch = import_module(lib)`` switching the
library, the data replaced by NumPy stand-ins (the same stream for both libraries) and
the initial weights loaded from the same NumPy ``state_dict`` (taken from torch's own
init). Both libraries then run the same steps.

What the comparison established (the investigation is in the report of the issue):

* float64: every loss, gradient and parameter agrees to ~1e-14 relative, so these tests
  ask for 1e-9. There is one exception. The biases of the two convolutions feed straight
  into BatchNorm2d in train mode, so their exact gradient is 0: the computed one is
  rounding noise (|g| ~ 1e-15 in float64, ~1e-7 in float32, with a random sign in either
  library). Adam divides by sqrt(v_hat) + eps, which turns that noise into an update of
  lr * g / (|g| + eps): about 1e-10 in float64 and up to lr in float32. The conv biases and
  the BatchNorm running means that follow them are therefore compared against that noise
  bound. The variant with the conv biases frozen is compared at 1e-9 for everything,
  eval logits included.
* float32: the two libraries sum in different orders (BLAS, reductions) and torch
  computes x**3 as x*x*x. Every op agrees with torch to within ~1.6 * eps * sum|terms|.
  The regression's training dynamics amplify that ~1e7-fold over 1,000 steps, and so
  does torch against itself with the batch rows reversed, but over the first 100 steps
  the parameters stay within 2e-5 relative (observed over 20 data seeds). The float32
  bounds below allow 1e-4, or 20 times torch's own distance from float64 where the
  quantity cancels.
"""

from importlib import import_module
from itertools import count

import numpy as np
import pytest

torch = pytest.importorskip("torch")

F32, F64 = np.float32, np.float64


def _np(t):
    return np.array(t.detach().numpy(), dtype=np.float64)


def _rel(a, b):
    """max |a - b| / max |a| (0 when both are 0)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    scale = np.abs(a).max()
    return float(np.abs(a - b).max() / scale) if scale else float(np.abs(b).max())


# ------------------------------------------------ pytorch/examples regression/main.py
REG_STEPS = 100


def regression_init():
    torch.manual_seed(0)
    return {k: v.numpy().copy() for k, v in torch.nn.Linear(4, 1).state_dict().items()}


def regression_script(lib, dtype, init, steps=REG_STEPS, variant="no_grad", seed=10,
                      data_dtype=None):
    torch = import_module(lib)  # the switch
    F = import_module(lib + ".nn.functional")
    stream = np.random.default_rng(seed)  # stands in for torch.randn's stream

    def randn(*shape):
        draw = stream.standard_normal(shape).astype(data_dtype or dtype)
        return torch.from_numpy(draw.astype(dtype))

    POLY_DEGREE = 4
    W_target = randn(POLY_DEGREE, 1) * 5
    b_target = randn(1) * 5

    def make_features(x):
        """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
        x = x.unsqueeze(1)
        return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)

    def f(x):
        return x.mm(W_target) + b_target.item()

    def get_batch(batch_size=32):
        random = randn(batch_size)
        x = make_features(random)
        y = f(x)
        return x, y

    fc = torch.nn.Linear(W_target.size(0), 1)
    if dtype == F64:
        fc = fc.double()
    fc.load_state_dict({k: torch.from_numpy(v.astype(dtype)) for k, v in init.items()})

    rec = {"loss": [], "param": [], "grad": []}
    for batch_idx in count(1):
        batch_x, batch_y = get_batch()
        fc.zero_grad()
        output = F.smooth_l1_loss(fc(batch_x), batch_y)
        loss = output.item()
        output.backward()
        rec["grad"].append(np.concatenate([_np(p.grad).ravel() for p in fc.parameters()]))
        for param in fc.parameters():
            if variant == "data":  # the script as pytorch/examples has it today
                param.data.add_(-0.1 * param.grad)
            else:  # the idiom both libraries take today
                with torch.no_grad():
                    param.add_(-0.1 * param.grad)
        rec["loss"].append(loss)
        rec["param"].append(np.concatenate([_np(p).ravel() for p in fc.parameters()]))
        if batch_idx >= steps:  # the script stops at loss < 1e-3; here a fixed count
            break
    return {k: np.array(v) for k, v in rec.items()}


def _compare_regression(dtype, variant, tol):
    init = regression_init()
    ref = regression_script("torch", dtype, init, variant="no_grad")
    got = regression_script("tapegrad", dtype, init, variant=variant)
    for step in range(REG_STEPS):
        for key in ("loss", "grad", "param"):
            r = _rel(ref[key][step], got[key][step])
            assert r <= tol, f"{key} at step {step + 1}: rel diff {r:.2e} > {tol:.0e}"


def test_regression_float64_matches_torch():
    _compare_regression(F64, "no_grad", 1e-9)


def test_regression_float32_within_rounding():
    init = regression_init()
    ref = regression_script("torch", F32, init)
    got = regression_script("tapegrad", F32, init)
    for step in range(REG_STEPS):  # observed <= 2e-5 over 20 data seeds; torch vs itself
        r = _rel(ref["param"][step], got["param"][step])  # with the rows reversed: 2.3e-5
        assert r <= 1e-4, f"param at step {step + 1}: rel diff {r:.2e}"
    # loss and gradient cancel (residuals near 0), so their relative differences are
    # ill-conditioned: judge instead each float32 run's distance from the float64 run on
    # the same float32 data. tapegrad must be about as accurate as torch (ratio observed
    # <= 9 over 20 data seeds; a real divergence gives orders of magnitude)
    exact = regression_script("torch", F64, init, data_dtype=F32)
    for key in ("loss", "grad", "param"):
        err_torch = np.abs(ref[key] - exact[key]).max()
        err_tapegrad = np.abs(got[key] - exact[key]).max()
        assert err_tapegrad <= 20 * err_torch, (key, err_tapegrad, err_torch)


def test_regression_dot_data_idiom_float64():
    _compare_regression(F64, "data", 1e-9)


# ------------------------- yunjey/pytorch-tutorial convolutional_neural_network/main.py
CNN_BATCH, CNN_STEPS, CNN_TEST = 20, 3, 40
LR = 0.001
NOISE_KEYS = ("layer1.0.bias", "layer2.0.bias", "layer1.1.running_mean", "layer2.1.running_mean")


def convnet_class(nn):
    class ConvNet(nn.Module):
        def __init__(self, num_classes=10):
            super().__init__()
            self.layer1 = nn.Sequential(
                nn.Conv2d(1, 16, kernel_size=5, stride=1, padding=2),
                nn.BatchNorm2d(16),
                nn.ReLU(),
                nn.MaxPool2d(kernel_size=2, stride=2))
            self.layer2 = nn.Sequential(
                nn.Conv2d(16, 32, kernel_size=5, stride=1, padding=2),
                nn.BatchNorm2d(32),
                nn.ReLU(),
                nn.MaxPool2d(kernel_size=2, stride=2))
            self.fc = nn.Linear(7 * 7 * 32, num_classes)

        def forward(self, x):
            out = self.layer1(x)
            out = self.layer2(out)
            out = out.reshape(out.size(0), -1)
            out = self.fc(out)
            return out

    return ConvNet


@pytest.fixture(scope="module")
def cnn_setup():
    torch.manual_seed(0)
    init = {k: v.numpy().copy() for k, v in convnet_class(torch.nn)(10).state_dict().items()}
    rng = np.random.default_rng(1)  # synthetic stand-ins for MNIST
    n = CNN_BATCH * CNN_STEPS
    data = (rng.random((n, 1, 28, 28)), rng.integers(0, 10, n),
            rng.random((CNN_TEST, 1, 28, 28)), rng.integers(0, 10, CNN_TEST))
    return init, data


def cnn_script(lib, dtype, init, data, variant="plain", freeze_conv_bias=False):
    torch = import_module(lib)  # the switch
    nn = import_module(lib + ".nn")
    Xtr, ytr, Xte, yte = data
    device = torch.device('cuda:0' if torch.cuda.is_available() else 'cpu')
    num_classes, batch_size, learning_rate = 10, CNN_BATCH, LR

    def loader(X, y):  # stands in for DataLoader(MNIST, shuffle=...)
        return [(torch.from_numpy(X[i:i + batch_size].astype(dtype)),
                 torch.from_numpy(y[i:i + batch_size].astype(np.int64)))
                for i in range(0, len(X), batch_size)]

    train_loader, test_loader = loader(Xtr, ytr), loader(Xte, yte)
    model = convnet_class(nn)(num_classes).to(device)
    if dtype == F64:
        model = model.double()
    model.load_state_dict({k: torch.from_numpy(v.astype(dtype) if v.dtype.kind == "f" else v)
                           for k, v in init.items()})
    if freeze_conv_bias:  # diagnosis: takes the noise-only gradients out of Adam
        model.layer1[0].bias.requires_grad_(False)
        model.layer2[0].bias.requires_grad_(False)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad],
                                 lr=learning_rate)

    rec = {"loss": [], "state": [], "grad": []}
    for images, labels in train_loader:
        images = images.to(device)
        labels = labels.to(device)
        outputs = model(images)
        loss = criterion(outputs, labels)
        optimizer.zero_grad()
        loss.backward()
        rec["grad"].append({k: _np(p.grad) for k, p in model.named_parameters()
                            if p.grad is not None})
        optimizer.step()
        rec["loss"].append(loss.item())
        rec["state"].append({k: _np(v) for k, v in model.state_dict().items()})

    model.eval()
    logits, preds = [], []
    with torch.no_grad():
        correct = 0
        total = 0
        for images, labels in test_loader:
            outputs = model(images.to(device))
            if variant == "data":  # as the tutorial writes it
                _, predicted = torch.max(outputs.data, 1)
            else:
                _, predicted = torch.max(outputs, 1)
            total += labels.size(0)
            correct += (predicted == labels.to(device)).sum().item()
            logits.append(_np(outputs))
            preds.append(np.asarray(predicted.numpy()))
    rec["logits"] = np.concatenate(logits)
    rec["pred"] = np.concatenate(preds)
    rec["acc"] = 100 * correct / total
    return rec


def _compare_cnn(ref, got, tol, noise_tol, logit_tol):
    for step in range(CNN_STEPS):
        r = _rel(ref["loss"][step], got["loss"][step])
        assert r <= tol, f"loss at step {step + 1}: rel diff {r:.2e}"
        for k, g in ref["grad"][step].items():
            if k in NOISE_KEYS:
                # exact gradient 0 (BatchNorm follows): both must be noise next to the weight's
                scale = np.abs(ref["grad"][step][k.replace("bias", "weight")]).max()
                for lib_rec in (ref, got):
                    assert np.abs(lib_rec["grad"][step][k]).max() <= 1e3 * tol * scale, k
            else:
                r = _rel(g, got["grad"][step][k])
                assert r <= tol, f"grad {k} at step {step + 1}: rel diff {r:.2e}"
        for k, v in ref["state"][step].items():
            if k in NOISE_KEYS:
                d = np.abs(v - got["state"][step][k]).max()
                assert d <= noise_tol * (step + 1), f"{k} at step {step + 1}: |diff| {d:.2e}"
            else:
                r = _rel(v, got["state"][step][k])
                assert r <= tol, f"{k} at step {step + 1}: rel diff {r:.2e}"
    dlogit = np.abs(ref["logits"] - got["logits"]).max()
    assert dlogit <= logit_tol * np.abs(ref["logits"]).max(), f"eval logits differ by {dlogit:.2e}"
    # a prediction may differ only where torch's top-2 logits are within that difference
    top2 = np.sort(ref["logits"], 1)
    margin = top2[:, -1] - top2[:, -2]
    flipped = ref["pred"] != got["pred"]
    assert np.all(margin[flipped] <= 2 * dlogit), "a prediction flipped away from a near-tie"
    assert abs(ref["acc"] - got["acc"]) <= 100 * flipped.sum() / len(flipped)


def test_cnn_float64_matches_torch(cnn_setup):
    init, data = cnn_setup
    ref = cnn_script("torch", F64, init, data)
    got = cnn_script("tapegrad", F64, init, data)
    # noise bound for the conv biases: Adam moves each by lr*g/(|g|+eps) with |g| ~ 1e-15,
    # eps = 1e-8, i.e. ~1e-10 a step; 1e-4 * lr leaves a wide margin and is still 1e4
    # times below the lr-sized step a wrong (non-zero) gradient would give
    _compare_cnn(ref, got, tol=1e-9, noise_tol=1e-4 * LR, logit_tol=1e-7)
    assert ref["acc"] == got["acc"]


def test_cnn_float64_frozen_conv_bias_matches_torch_everywhere(cnn_setup):
    init, data = cnn_setup
    ref = cnn_script("torch", F64, init, data, freeze_conv_bias=True)
    got = cnn_script("tapegrad", F64, init, data, freeze_conv_bias=True)
    _compare_cnn(ref, got, tol=1e-9, noise_tol=1e-9, logit_tol=1e-9)
    np.testing.assert_array_equal(ref["pred"], got["pred"])


def test_cnn_float32_within_rounding(cnn_setup):
    init, data = cnn_setup
    ref = cnn_script("torch", F32, init, data)
    got = cnn_script("tapegrad", F32, init, data)
    # float32 noise in the conv-bias gradients is not small next to Adam's eps: each step
    # moves those biases by up to (1 - beta1) / sqrt(1 - beta2) * lr = 3.2 * lr in either
    # library, with a random sign (observed 1.9e-3 a step); other values: observed <= 1e-5
    _compare_cnn(ref, got, tol=1e-4, noise_tol=2 * 3.2 * LR, logit_tol=1.0)


def test_cnn_float32_frozen_conv_bias_within_rounding(cnn_setup):
    init, data = cnn_setup
    ref = cnn_script("torch", F32, init, data, freeze_conv_bias=True)
    got = cnn_script("tapegrad", F32, init, data, freeze_conv_bias=True)
    _compare_cnn(ref, got, tol=1e-4, noise_tol=1e-4, logit_tol=1e-4)


def test_cnn_dot_data_idiom_float64(cnn_setup):
    init, data = cnn_setup
    ref = cnn_script("torch", F64, init, data, variant="data")
    got = cnn_script("tapegrad", F64, init, data, variant="data")
    _compare_cnn(ref, got, tol=1e-9, noise_tol=1e-4 * LR, logit_tol=1e-7)
