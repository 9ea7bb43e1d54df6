"""tapegrad.testing.specs: check_spec derives the second-order check from the
Function classes a spec records; spec opt-outs, empty specs and the
NOT_DIFFERENTIABLE list are checked."""

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import ArgumentError
from tapegrad.ops.localnorm import NOffset
from tapegrad.testing import GradcheckError
from tapegrad.testing import specs as specs_mod
from tapegrad.testing.specs import OpSpec, check_not_differentiable, check_spec


def _x(r):
    return [r.normal(size=(2, 3))]


def _x4(r):
    return [r.normal(size=(1, 2, 4, 4))]


class _SavedConstant(tg.Function):  # claims twice, but saves 3 x^2 as a constant
    differentiable_twice = True

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(3 * x ** 2)
        return x ** 3

    @staticmethod
    def backward(ctx, g):
        return g * ctx.saved_tensors[0]


def test_second_order_follows_the_recorded_functions(monkeypatch):
    twice = OpSpec("tanh", lambda x: ops.tanh(x) * x, _x)
    assert twice.twice and check_spec(twice) == {1: "pass", 2: "pass"}
    monkeypatch.setattr(NOffset, "differentiable_twice", False)  # as if it were once only
    once = OpSpec("noffset", lambda x: ops.noffset(ops.tanh(x), [0.5, 0.6]), _x4)
    assert not once.twice
    assert check_spec(once) == {1: "pass", 2: "skip: NOffset not differentiable_twice"}


def test_a_wrong_second_derivative_fails():
    spec = OpSpec("cube", _SavedConstant.apply, _x)
    assert check_spec(spec, orders=(1,)) == {1: "pass"}
    with pytest.raises(GradcheckError, match=r"grad of cube"):
        check_spec(spec, orders=(2,))


def test_opting_out_needs_a_reason_and_a_twice_differentiable_op(monkeypatch):
    monkeypatch.setattr(NOffset, "differentiable_twice", False)
    spec = OpSpec("cube", _SavedConstant.apply, _x, first_order_only="known wrong")
    assert check_spec(spec) == {1: "pass", 2: "skip: known wrong"}
    stale = OpSpec("noffset", lambda x: ops.noffset(x, [0.5, 0.6]), _x4, first_order_only="slow")
    with pytest.raises(ArgumentError, match=r"noffset: first_order_only, but NOffset not"):
        check_spec(stale)


def test_a_spec_that_records_nothing_is_refused():
    with pytest.raises(GradcheckError, match="records no op.*NOT_DIFFERENTIABLE"):
        check_spec(OpSpec("sign", ops.sign, _x))
    with pytest.raises(ArgumentError, match="orders are 1 and 2"):
        check_spec(OpSpec("tanh", ops.tanh, _x), orders=(3,))


def test_not_differentiable_list_is_checked(monkeypatch):
    monkeypatch.setitem(specs_mod.NOT_DIFFERENTIABLE, "tanh", _x)
    with pytest.raises(GradcheckError, match="tanh: listed in NOT_DIFFERENTIABLE"):
        check_not_differentiable("tanh")
    check_not_differentiable("sign")
    assert not ops.sign(tg.tensor(np.ones(2), requires_grad=True)).requires_grad
