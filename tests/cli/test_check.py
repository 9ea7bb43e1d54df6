"""tapegrad check: the gradcheck table over the op specs, 1st and 2nd order."""

import numpy as np

import tapegrad as tg
from tapegrad.cli import check, main
from tapegrad.ops import distance
from tapegrad.ops.localnorm import NOffset
from tapegrad.testing.specs import OpSpec


def _row(out, spec_id):
    return next(line.split() for line in out.splitlines() if line.startswith(spec_id + " "))


def test_check_passes_and_prints_a_row_per_spec(capsys):
    assert main(["check", "--only", "relu"]) == 0
    out = capsys.readouterr().out
    assert "1st   2nd" in out
    assert _row(out, "relu")[1:3] == ["pass", "pass"]
    assert out.strip().endswith("0 failed on cpu")


def test_check_marks_ops_without_second_derivatives(monkeypatch, capsys):
    monkeypatch.setattr(NOffset, "differentiable_twice", False)  # as if it were once only
    assert main(["check", "--only", "noffset"]) == 0
    out = capsys.readouterr().out
    assert _row(out, "noffset")[1:3] == ["pass", "-"]


def test_check_reports_failures_and_exits_1(monkeypatch, capsys):
    # relu at its kink: central differences see slope 1/2, the vjp 0
    specs = [OpSpec("wrong", tg.ops.relu, lambda r: [np.zeros(3)]),
             OpSpec("broken", lambda x: x @ x, lambda r: [np.ones((2, 3))])]
    monkeypatch.setattr(check, "all_specs", lambda: specs)
    assert main(["check"]) == 1
    out = capsys.readouterr().out
    assert _row(out, "wrong")[1:3] == ["FAIL", "FAIL"]
    assert _row(out, "broken")[1:3] == ["ERROR", "ERROR"] and "ShapeError" in out
    assert "0 passed, 2 failed" in out


def test_check_fails_a_wrong_second_derivative(monkeypatch, capsys):
    # pdist's recorded vjp recomputes s = sum |x - x0|^p from x and x0; were s a
    # constant there (as the saved one is), its second derivative would be wrong
    power_sum = distance._power_sum

    def constant_s(xp, d, p):
        return power_sum(xp, d.detach() if isinstance(d, tg.Tensor) else d, p)

    monkeypatch.setattr(distance, "_power_sum", constant_s)
    assert main(["check", "--only", "pdist"]) == 1
    assert _row(capsys.readouterr().out, "pdist")[1:3] == ["pass", "FAIL"]


def test_check_unknown_device_is_one_line(capsys):
    assert main(["check", "--device", "tpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown device" in err
