"""tapegrad.onnx.trace: records every op (nothing needs to require grad), only
in the tracing thread, refuses to nest, and leaves Function as it was."""

import threading

import pytest

import tapegrad as tg
from tapegrad import ops
from tapegrad.errors import GraphError
from tapegrad.onnx.trace import Alias, trace
from tapegrad.tape import Function
from tapegrad.tensor import Tensor


def test_trace_records_without_grad_and_restores():
    apply, unary = Function.__dict__["apply"], Function.__dict__["_apply_unary"]
    x = tg.randn(2, 3)
    with trace() as tr:
        y = ops.relu(x) * 2
    assert [r.fn.__name__ for r in tr.records] == ["ReLU", "Mul"]
    assert tr.records[-1].outputs[0] is y
    assert Function.__dict__["apply"] is apply and Function.__dict__["_apply_unary"] is unary
    with pytest.raises(ZeroDivisionError), trace():
        ops.relu(x)
        raise ZeroDivisionError
    assert Function.__dict__["apply"] is apply  # restored after an exception too


def test_trace_refuses_nesting_and_records_one_thread():
    x = tg.randn(2, 3)
    with trace() as tr:
        with pytest.raises(GraphError, match="do not nest"), trace():
            pass
        t = threading.Thread(target=lambda: ops.tanh(x))
        t.start()
        t.join()
        ops.sigmoid(x)
    assert [r.fn.__name__ for r in tr.records] == ["Sigmoid"]
    with trace():  # usable again once the first has ended
        pass


def test_trace_refuses_when_apply_is_replaced_inside_it():
    instrument = pytest.importorskip("tapegrad.autograd.instrument")
    obs = instrument.Observer()
    x = tg.randn(2, 3)
    with pytest.raises(GraphError, match="replaced while the trace ran"), trace():
        instrument.add(obs)
        instrument.remove(obs)
        ops.relu(x)
    assert Function.__dict__["apply"] is instrument._ORIG_APPLY
    instrument.add(obs)  # started outside: its wrappers are traced through, then kept
    try:
        with trace() as tr:
            ops.relu(x)
        assert [r.fn.__name__ for r in tr.records] == ["ReLU"]
        assert Function.__dict__["apply"] is not instrument._ORIG_APPLY
    finally:
        instrument.remove(obs)


def test_in_place_updates_and_comparisons_are_recorded():
    before = {k: Tensor.__dict__[k] for k in ("__gt__", "__eq__", "_bitwise", "_inplace")}
    x = tg.randn(2, 3)
    with trace() as tr:
        y = x * 2
        y += 1
        m = (y > 0) & (x < 1)
    kinds = [type(r).__name__ if isinstance(r, Alias) else r.fn.__name__ for r in tr.records]
    assert kinds == ["Mul", "Add", "Alias", "Greater", "Less", "LogicalAnd"]
    assert tr.records[2].target is y and tr.records[-1].outputs[0] is m
    assert {k: Tensor.__dict__[k] for k in before} == before  # Tensor's own again
