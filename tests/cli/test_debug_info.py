"""`tapegrad train --debug-info`: debug_info.csv per epoch, resume, the figure."""

import csv
import os
import sys

import pytest

from tapegrad import engine
from tapegrad.cli import main
from tapegrad.cli.debug_info import CSV_NAME, FIELDS, PNG_NAME, per_layer

pytest.importorskip("sklearn")  # the digits dataset ships with scikit-learn

QUICK = ["-q", "--train-samples", "200", "--test-samples", "100", "--model", "mlp"]
# (0:Flatten reshapes the input, which needs no gradient: not on the tape)
LAYERS = ["1:Linear", "2:ReLU", "3:Linear", "4:ReLU", "5:Linear",
          "CrossEntropyLoss"]


def _rows(folder):
    with open(os.path.join(folder, CSV_NAME), newline="") as f:
        return list(csv.DictReader(f))


def test_debug_info_csv_per_epoch_and_resume(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if it were not installed
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "2", "--debug-info", *QUICK]) == 0
    rows = _rows(out)
    assert tuple(rows[0]) == FIELDS
    assert [r["layer"] for r in rows if r["epoch"] == "1"] == LAYERS
    assert [r["layer"] for r in rows if r["epoch"] == "2"] == LAYERS
    steps = -(-200 // 32)
    for r in rows:
        assert int(r["calls"]) == steps
        assert float(r["mean_abs_grad"]) > 0 and float(r["mean_abs_output"]) > 0
        assert float(r["forward_ms"]) > 0 and float(r["backward_ms"]) > 0
    first = {r["layer"]: r for r in rows if r["epoch"] == "1"}
    assert first["1:Linear"]["op"] == "linear" and first["1:Linear"]["shape"] == "32x256"
    assert float(first["CrossEntropyLoss"]["mean_abs_grad"]) == 1.0  # backward's seed
    assert int(first["2:ReLU"]["saved_bytes"]) > 0
    err = capsys.readouterr().err
    assert err.count("matplotlib is not installed") == 1  # noted once, not per epoch
    assert not os.path.exists(os.path.join(out, PNG_NAME))
    assert engine._observe is None  # the profile ended with the epoch

    assert main(["train", "--out", out, "--epochs", "3", "--resume", "-q", "--debug-info"]) == 0
    rows = _rows(out)
    assert [int(r["epoch"]) for r in rows] == [1] * 6 + [2] * 6 + [3] * 6
    history = per_layer([{**r, "epoch": int(r["epoch"]),
                          "mean_abs_grad": float(r["mean_abs_grad"]),
                          "mean_abs_output": float(r["mean_abs_output"])} for r in rows])
    assert list(history) == LAYERS and sorted(history["1:Linear"]) == [1, 2, 3]
    assert history["CrossEntropyLoss"][1][0] is None  # the loss's seed is not plotted


def test_without_the_flag_nothing_is_profiled(tmp_path):
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "1", *QUICK]) == 0
    assert not os.path.exists(os.path.join(out, CSV_NAME))


def test_figure_next_to_curves(tmp_path):
    pytest.importorskip("matplotlib")
    out = str(tmp_path / "run")
    assert main(["train", "--out", out, "--epochs", "2", "--debug-info", *QUICK]) == 0
    assert os.path.getsize(os.path.join(out, PNG_NAME)) > 0
    assert os.path.getsize(os.path.join(out, "curves.png")) > 0
