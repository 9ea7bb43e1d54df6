"""tapegrad check: the gradcheck table over the op specs, 1st and 2nd order."""

import numpy as np

import tapegrad as tg
from tapegrad.cli import check, main
from tapegrad.testing.specs import OpSpec


def _row(out, spec_id):
    return next(line.split() for line in out.splitlines() if line.startswith(spec_id + " "))


def test_check_passes_and_prints_a_row_per_spec(capsys):
    assert main(["check", "--only", "relu"]) == 0
    out = capsys.readouterr().out
    assert "1st   2nd" in out
    assert _row(out, "relu")[1:3] == ["pass", "pass"]
    assert out.strip().endswith("0 failed on cpu")


def test_check_marks_ops_without_second_derivatives(capsys):
    assert main(["check", "--only", "max_pool2d"]) == 0
    out = capsys.readouterr().out
    assert _row(out, "max_pool2d[2x2")[2:4] == ["pass", "-"]


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
    assert _row(out, "wrong")[1:3] == ["FAIL", "-"]
    assert _row(out, "broken")[1:3] == ["ERROR", "ERROR"] and "ShapeError" in out
    assert "0 passed, 2 failed" in out


def test_check_fails_a_wrong_second_derivative(monkeypatch, capsys):
    class Cube(tg.Function):  # claims twice, but 3 x^2 is saved as a constant
        differentiable_twice = True

        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(3 * x ** 2)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            return g * ctx.saved_tensors[0]

    monkeypatch.setattr(check, "all_specs",
                        lambda: [OpSpec("cube", Cube.apply, lambda r: [r.normal(size=3)])])
    assert main(["check"]) == 1
    assert _row(capsys.readouterr().out, "cube")[1:3] == ["pass", "FAIL"]


def test_check_unknown_device_is_one_line(capsys):
    assert main(["check", "--device", "tpu"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown device" in err
