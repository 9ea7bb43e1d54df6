"""The scripts in examples/ run (shortened) and do what they say."""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"


def _run(script, *args, env=None):
    proc = subprocess.run([sys.executable, str(EXAMPLES / script), *args], capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_lenet_digits_one_epoch():
    pytest.importorskip("sklearn")
    out = _run("lenet_digits.py", env={"TAPEGRAD_EXAMPLE_EPOCHS": "1"})
    accs = [float(a) for a in re.findall(r"test accuracy ([\d.]+)%", out)]
    assert len(accs) == 1
    assert accs[0] > 50.0  # one epoch already beats chance (10%) by far


def test_custom_function():
    pytest.importorskip("hypothesis")
    out = _run("custom_function.py")
    assert "gradcheck passed" in out
    w, b = map(float, re.search(r"y = ([-\d.]+) x \+ ([-\d.]+)", out).groups())
    assert abs(w - 2.0) < 0.15 and abs(b - 0.5) < 0.15  # robust to the outlier


_TORCH_IMPORTS = """import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
from torch.optim.lr_scheduler import StepLR
"""


def _from_pytorch_body():
    """The script's text, and its PyTorch original: the same text with the import
    block swapped (the only lines that may differ)."""
    src = (EXAMPLES / "from_pytorch.py").read_text()
    first, last = "import tapegrad as torch\n", "from tapegrad.optim.lr_scheduler import StepLR\n"
    a, b = src.index(first), src.index(last) + len(last)
    assert src[a:b].count("\n") == 6  # six import lines, nothing else
    return src, src[:a] + _TORCH_IMPORTS + src[b:]


def _accuracies(out):
    return [float(a) for a in re.findall(r"test accuracy ([\d.]+)%", out)]


def test_from_pytorch_runs_on_tapegrad_and_its_original_on_torch(tmp_path):
    pytest.importorskip("sklearn")
    ours, original = _from_pytorch_body()
    out = _run("from_pytorch.py", env={"TAPEGRAD_EXAMPLE_EPOCHS": "2"})
    accs = _accuracies(out)
    assert len(accs) == 3 and accs[-1] > 90.0  # two epochs and the restored model
    assert f"restored test accuracy {accs[-1]:.2f}%" in out  # the checkpoint round trip
    if importlib.util.find_spec("torch") is None:
        return
    script = tmp_path / "from_pytorch_torch.py"
    script.write_text(original)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "TAPEGRAD_EXAMPLE_EPOCHS": "2"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert _accuracies(proc.stdout)[-1] > 90.0


def _floats(pattern, out):
    return [float(v) for v in re.findall(pattern, out)]


def test_wgan_gp_digits_checks_the_penalty_gradient_and_trains():
    pytest.importorskip("sklearn")
    out = _run("wgan_gp_digits.py", env={"TAPEGRAD_EXAMPLE_STEPS": "5"})
    (rel,) = _floats(r"penalty gradient check: .* relative error ([\d.e+-]+)", out)
    assert rel < 1e-6
    norms = _floats(r"mean gradient norm ([\d.]+)", out)
    penalties = _floats(r"gradient penalty ([\d.]+)", out)
    assert len(norms) == len(penalties) == 5
    assert abs(norms[-1] - 1) < abs(norms[0] - 1) and penalties[-1] < penalties[0]
    assert all(w > 0 for w in _floats(r"Wasserstein estimate ([-\d.]+)", out))
    rows = out.splitlines()[-8:]  # six 8x8 samples as text, two characters a pixel
    assert all(len(r) == 6 * 16 + 5 * 3 and set(r) <= set(" .:-=+*#%@") for r in rows)


def test_hvp_lenet_matches_central_differences():
    pytest.importorskip("sklearn")
    out = _run("hvp_lenet.py", "--power-iterations", "3", env={"TAPEGRAD_EXAMPLE_EPOCHS": "1"})
    (rel,) = _floats(r"H v against central differences.* relative error ([\d.e+-]+)", out)
    assert rel < 1e-7
    (eig,) = _floats(r"largest Hessian eigenvalue .*: ([-\d.]+)", out)
    assert eig > 0  # a cross-entropy loss is locally convex in its largest direction


def test_maml_step_meta_gradient_and_adaptation():
    pytest.importorskip("sklearn")
    out = _run("maml_step.py", env={"TAPEGRAD_EXAMPLE_ITERS": "40"})
    (rel,) = _floats(r"meta-gradient check .* worst relative error ([\d.e+-]+)", out)
    assert rel < 1e-6
    without, initial, learned = _floats(r"([\d.]+)% (?:without|after)", out)
    assert learned > initial + 10 and learned > without + 10  # 40 iterations already help
