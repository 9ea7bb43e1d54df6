"""ONNX's conformance suite on tapegrad's backend (tapegrad.onnx.backend).

Every case of the data shipped inside the onnx package runs: the generated node
tests, ``pytorch-converted``, ``pytorch-operator``, ``simple``, and the
model-zoo graphs of ``light`` against their shipped outputs. A case whose
graph uses an operator tapegrad does not import is skipped once per operator
set (with the count); one whose attributes or dtypes the importer refuses is
skipped with that error; every other case must match the reference within the
suite's own tolerances.
"""

from __future__ import annotations

import collections
import io
import unittest

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import onnx_suite as suite  # noqa: E402 - after the importorskip

from tapegrad.onnx import UnsupportedOnnxError, backend  # noqa: E402
from tapegrad.onnx._rules import RULES  # noqa: E402

_CASES = {kind: suite.cases(kind) for kind in suite.KINDS}

# supported cases whose reference tapegrad does not reproduce, and why
KNOWN = {
    "test_attention_4d_causal_fp16_expanded": "float16: tapegrad computes softmax in float32 "
    "and rounds once; the reference rounds each float16 step (2 of 192 values differ by "
    "2 ulp)",
}


def _missing_ops(model):
    return sorted({n.op_type for n in model.graph.node} - set(RULES))


def _params(kind):
    """Runnable cases, plus one skipped entry for those using missing operators."""
    run, missing, n = [], collections.Counter(), 0
    for case in _CASES[kind]:
        model = case.model if case.kind == "node" else None
        if model is not None and not backend.is_compatible(model):
            missing.update(_missing_ops(model))
            n += 1
        elif case.name in KNOWN:
            run.append(pytest.param(case, id=case.name, marks=pytest.mark.xfail(
                reason=KNOWN[case.name], strict=True)))
        else:
            run.append(pytest.param(case, id=case.name))
    if n:
        run.append(pytest.param(None, id="unsupported-operators", marks=pytest.mark.skip(
            reason=f"{n} {kind} case(s) use operators tapegrad does not import: "
                   f"{', '.join(sorted(missing))}")))
    return run


def _check(case):
    model, sets = case.load()
    if not backend.is_compatible(model):
        pytest.skip(f"operators tapegrad does not import: {', '.join(_missing_ops(model))}")
    try:
        rep = backend.prepare(model, "CPU")
        results = [(outs, rep.run(ins)) for ins, outs in sets]
    except UnsupportedOnnxError as e:
        pytest.skip(str(e))
    assert sets, f"{case.name}: no test data"
    for expected, got in results:
        suite.compare(expected, got, case.rtol, case.atol, case.name)


@pytest.mark.parametrize("case", _params("node"))
def test_node(case):
    _check(case)


@pytest.mark.parametrize("case", _params("pytorch-converted"))
def test_pytorch_converted(case):
    _check(case)


@pytest.mark.parametrize("case", _params("pytorch-operator"))
def test_pytorch_operator(case):
    _check(case)


@pytest.mark.parametrize("case", _params("simple"))
def test_simple(case):
    _check(case)


# Model-zoo graphs whose shipped reference cannot be met by any float32 engine whose
# GEMM rounds identical rows differently, with the softmax input checked instead.
ILL_CONDITIONED = {
    # The light model's weights are constant, so all 1000 logits are equal in exact
    # arithmetic and the reference is uniform (0.001). They reach 9.5e9, where one
    # float32 ulp is 1024: OpenBLAS's SGEMM kernels accumulate identical rows in
    # different orders (rows 6-11 of every 12 on this machine, at any thread count),
    # so logits 1 ulp apart come out and softmax turns them into 0 or 0.002.
    "test_squeezenet": "softmaxout_1",
}


def _softmax_input(model, output):
    """``model`` with the input of the Softmax node that makes ``output`` exposed."""
    (node,) = [n for n in model.graph.node if n.op_type == "Softmax" and output in n.output]
    model.graph.output.append(onnx.ValueInfoProto(name=node.input[0]))
    return model


def _check_ill_conditioned(case, model, sets, output):
    """The reference is uniform, so the logits must agree within float32 rounding of
    their size, and the output must be the softmax of the logits computed."""
    rep = backend.prepare(_softmax_input(model, output), "CPU")
    for ins, outs in sets:
        (expected,) = outs
        assert np.ptp(expected) == 0, f"{case.name}: the reference is no longer uniform"
        got, logits = (np.asarray(a, np.float64) for a in rep.run(ins))
        spread = np.ptp(logits) / np.abs(logits).max()
        assert spread <= 4 * np.finfo(np.float32).eps, (case.name, spread)
        e = np.exp(logits - logits.max(axis=1, keepdims=True))
        np.testing.assert_allclose(got, e / e.sum(axis=1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("case", _params("light"))
def test_model_zoo_light(case):
    """Every model-zoo graph must pass (no skip allowed)."""
    model, sets = case.load()
    assert backend.is_compatible(model), _missing_ops(model)
    if case.name in ILL_CONDITIONED:
        _check_ill_conditioned(case, model, sets, ILL_CONDITIONED[case.name])
        return
    rep = backend.prepare(model, "CPU")
    for ins, outs in sets:
        suite.compare(outs, rep.run(ins), case.rtol, case.atol, case.name)


def test_model_zoo_complete():
    names = {c.name for c in _CASES["light"]}
    assert {"test_bvlc_alexnet", "test_vgg19", "test_resnet50", "test_squeezenet",
            "test_inception_v1", "test_inception_v2", "test_zfnet512", "test_densenet121",
            "test_shufflenet"} <= names


def test_counts_floor():
    """Guards against the suite silently shrinking (an importer change that makes
    supported cases skip): at least this many node cases run on supported operators."""
    runnable = [c for c in _CASES["node"] if backend.is_compatible(c.model)]
    assert len(runnable) >= 1100


def test_onnx_backend_test_runner():
    """ONNX's own runner (``onnx.backend.test.BackendTest``) drives the backend too."""
    bt = onnx.backend.test.BackendTest(backend, __name__)
    bt.include(r"^test_(relu|conv_with_strides_padding|maxpool_2d_pads|averagepool_2d_"
               r"ceil|lrn|gemm_all_attributes|softmax_axis_0|batchnorm_epsilon|"
               r"reshape_negative_dim|slice|unsqueeze_axis_0)_cpu$")
    result = unittest.TextTestRunner(stream=io.StringIO(), verbosity=0).run(
        bt.test_suite)
    ran = result.testsRun - len(result.skipped)
    assert result.wasSuccessful(), (result.failures + result.errors)[:3]
    assert ran >= 10


def test_backend_api():
    assert backend.supports_device("CPU")
    assert not backend.supports_device("TPU")
    node = onnx.helper.make_node("Relu", ["x"], ["y"])
    import numpy as np

    x = np.array([-1.0, 2.0], np.float32)
    (y,) = backend.run_node(node, [x])
    np.testing.assert_array_equal(y, [0.0, 2.0])
