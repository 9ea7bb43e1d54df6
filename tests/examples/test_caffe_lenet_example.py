"""examples/caffe_lenet.py: Caffe's LeNet files trained by the Solver on the
MNIST-shaped digits, its deploy net, and the ONNX export checked in onnxruntime."""

import os
import pathlib
import re
import subprocess
import sys

import pytest

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "caffe_lenet.py"


def test_caffe_lenet_trains_and_exports(tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("google.protobuf")
    proc = subprocess.run([sys.executable, str(EXAMPLE), "--max-iter", "40", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env={**os.environ})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    (trained,) = re.findall(r"trained 40 iterations in [\d.]+ s: test accuracy ([\d.]+)%", out)
    (deployed,) = re.findall(r"deploy net .*: accuracy ([\d.]+)% on the 360 test digits", out)
    assert float(trained) > 50 and float(trained) == float(deployed)  # the same weights
    assert (tmp_path / "lenet_iter_40.caffemodel").is_file()
    losses = [float(v) for v in re.findall(r"Iteration \d+, loss = ([\d.]+)", out)]
    assert losses[-1] < losses[0]
    if "onnxruntime is not installed" not in out:
        (diff,) = re.findall(r"differ by at most ([\d.e+-]+)", out)
        assert float(diff) < 1e-5 and (tmp_path / "lenet.onnx").is_file()
