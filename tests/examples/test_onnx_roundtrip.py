"""examples/onnx_roundtrip.py runs (one training epoch) and does what it says:
onnxruntime and the imported model give tapegrad's logits, and fine-tuning the
imported model trains it."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "examples" / "onnx_roundtrip.py"


def test_onnx_roundtrip_one_epoch(tmp_path):
    for mod in ("onnx", "onnxruntime", "sklearn"):
        pytest.importorskip(mod)
    out_file = tmp_path / "digits.onnx"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out_file)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "TAPEGRAD_EXAMPLE_EPOCHS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert out_file.stat().st_size > 100_000  # the weights are in the file
    acc = {k: float(v) for k, v in re.findall(r"(tapegrad|onnxruntime) test accuracy ([\d.]+)%",
                                               out)}
    assert acc["onnxruntime"] == acc["tapegrad"] > 50.0
    diffs = [float(d) for d in re.findall(r"max \|\w+ - tapegrad\| = ([\d.e+-]+)", out)]
    assert len(diffs) == 2 and max(diffs) <= 1e-5
    imported = float(re.search(r"imported: \d+ parameters, test accuracy ([\d.]+)%", out)[1])
    assert imported == acc["tapegrad"]
    tuned = float(re.search(r"fine-tuned imported model: .* test accuracy ([\d.]+)%", out)[1])
    assert tuned > 80.0  # one epoch of fine-tuning keeps (here: improves) the accuracy
