"""Helpers for the ONNX tests: build small models with onnx.helper and run them in
onnxruntime and in tapegrad."""

from __future__ import annotations

import numpy as np
import pytest

_NP_TO_ONNX = {np.dtype(np.float32): 1, np.dtype(np.float64): 11, np.dtype(np.int64): 7,
               np.dtype(np.int32): 6, np.dtype(np.bool_): 9}


def make_model(nodes, inputs, outputs, initializers=None, opset=17, out_dtype=np.float32):
    """A ModelProto: ``inputs`` {name: example array}, ``outputs`` names (their dtype
    ``out_dtype``, shapes left to inference) or {name: shape}, ``initializers``
    {name: array}."""
    import onnx
    from onnx import helper, numpy_helper

    ins = [helper.make_tensor_value_info(n, _NP_TO_ONNX[a.dtype], a.shape)
           for n, a in inputs.items()]
    shapes = outputs if isinstance(outputs, dict) else dict.fromkeys(outputs)
    outs = [helper.make_tensor_value_info(n, _NP_TO_ONNX[np.dtype(out_dtype)], s)
            for n, s in shapes.items()]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (initializers or {}).items()]
    graph = helper.make_graph(nodes, "test_graph", ins, outs, inits)
    ir = 8 if opset <= 17 else 10
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=ir)
    # output shapes from ONNX's inference (the checker wants them)
    model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    onnx.checker.check_model(model)
    return model


def run_ort(model, inputs):
    """onnxruntime's outputs (CPU, no graph optimisations: the reference kernels)."""
    ort = pytest.importorskip("onnxruntime")
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])
    return sess.run(None, inputs)


def run_tapegrad(model, inputs):
    import tapegrad
    import tapegrad.onnx

    m = tapegrad.onnx.load(model)
    with tapegrad.no_grad():
        out = m(*[tapegrad.tensor(a) for a in inputs.values()])
    out = out if isinstance(out, tuple) else (out,)
    return [o.numpy() if hasattr(o, "numpy") else np.asarray(o.array) for o in out]


def assert_matches_ort(model, inputs, rtol=1e-5, atol=1e-5):
    """tapegrad's outputs equal onnxruntime's (shapes, dtypes, values)."""
    want = run_ort(model, inputs)
    got = run_tapegrad(model, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def f32(rng, *shape):
    """A standard-normal float32 array."""
    return rng.standard_normal(shape).astype(np.float32)


def one_node(op, x, attrs=None, inits=None, extra_inputs=(), opset=17):
    """A model of one ``op`` node on input ``x`` (plus initializer inputs)."""
    from onnx import helper

    node = helper.make_node(op, ["x"] + list(extra_inputs), ["y"], **(attrs or {}))
    return make_model([node], {"x": x}, ["y"], inits, opset=opset)
