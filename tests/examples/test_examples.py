"""The scripts in examples/ run (shortened) and do what they say."""

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
