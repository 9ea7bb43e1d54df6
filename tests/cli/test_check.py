"""tapegrad check: the gradcheck table over the op specs."""

import numpy as np

import tapegrad as tg
from tapegrad.cli import check, main
from tapegrad.testing.specs import OpSpec


def test_check_passes_and_prints_a_row_per_spec(capsys):
    assert main(["check", "--only", "relu"]) == 0
    out = capsys.readouterr().out
    assert "relu" in out and "1st+2nd  pass" in out
    assert out.strip().endswith("0 failed on cpu")


class _Wrong(tg.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 3


def test_check_reports_failures_and_exits_1(monkeypatch, capsys):
    specs = [OpSpec("wrong", _Wrong.apply, lambda r: [r.normal(size=3)]),
             OpSpec("broken", lambda x: x @ x, lambda r: [np.ones((2, 3))])]
    monkeypatch.setattr(check, "all_specs", lambda: specs)
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert "wrong  " in out and "FAIL" in out
    assert "ERROR  " in out and "ShapeError" in out
    assert "0 passed, 2 failed" in out


def test_check_unknown_device_is_one_line(capsys):
    assert main(["check", "--device", "tpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown device" in err
