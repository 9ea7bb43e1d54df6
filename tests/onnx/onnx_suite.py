"""ONNX's conformance data (shipped inside the onnx package), as cases to run
on tapegrad's backend: the generated node tests, the model directories
(``pytorch-converted``, ``pytorch-operator``, ``simple``) and the ``light``
model-zoo graphs with their reference outputs."""

from __future__ import annotations

import glob
import json
import os
import warnings
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.loader import load_model_tests
from onnx.backend.test.runner import Runner

DATA = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
KINDS = ("node", "pytorch-converted", "pytorch-operator", "simple", "light")


@dataclass
class Case:
    kind: str
    name: str
    model: onnx.ModelProto | None
    path: str | None  # a model directory or a light .onnx file
    rtol: float
    atol: float
    data: list | None = None  # (inputs, outputs) pairs, node tests only

    def load(self):
        """(model, [(inputs, expected outputs)]) with arrays."""
        if self.kind == "node":
            sets = [([_array(i) for i in ins], [_array(o) for o in outs])
                    for ins, outs in self.data]
            return self.model, sets
        if self.kind == "light":
            return _light(self.path)
        model = onnx.load(os.path.join(self.path, "model.onnx"))
        sets = []
        for d in sorted(glob.glob(os.path.join(self.path, "test_data_set_*"))):
            ins = [_pb(f) for f in sorted(glob.glob(os.path.join(d, "input_*.pb")),
                                          key=_index)]
            outs = [_pb(f) for f in sorted(glob.glob(os.path.join(d, "output_*.pb")),
                                           key=_index)]
            sets.append((ins, outs))
        return model, sets


def _index(path):
    return int(os.path.basename(path).split("_")[-1].split(".")[0])


def _array(v):
    return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v


def _pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def _dummy(vi):
    """The suite's input for a light model (``Runner.generate_dummy_data``, not
    random): ``arange(n) / n`` in the input's shape, unknown dims 1, float32."""
    shape = tuple(d.dim_value if d.HasField("dim_value") else 1
                  for d in vi.type.tensor_type.shape.dim)
    n = int(np.prod(shape))
    return (np.arange(n).reshape(shape) / n).astype(np.float32)


def _light(path):
    """A light model with the suite's input and its shipped reference output."""
    model = onnx.load(path)
    inits = {t.name for t in model.graph.initializer}
    ins = [_dummy(x) for x in model.graph.input if x.name not in inits]
    prefix = os.path.splitext(path)[0]
    outs = [_pb(f"{prefix}_output_{i}.pb") for i in range(len(model.graph.output))]
    return model, [(ins, outs)]


def cases(kind):
    """Every case of one data directory, by name."""
    if kind == "node":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            tcs = load_model_tests(kind="node")
        return [Case("node", t.name, t.model, None, t.rtol, t.atol, t.data_sets) for t in tcs]
    if kind == "light":
        out = []
        for t in load_model_tests(kind="real"):
            with open(os.path.join(DATA, "real", t.name, "data.json")) as f:
                meta = json.load(f)
            path = os.path.join(DATA, "light", f"light_{meta['model_name']}.onnx")
            out.append(Case("light", t.name, None, path, t.rtol, t.atol))
        return out
    return [Case(kind, t.name, None, t.model_dir, t.rtol, t.atol)
            for t in load_model_tests(kind=kind)]


def compare(expected, got, rtol, atol, where):
    """The suite's own comparison (shapes, dtypes, ``assert_allclose``)."""
    Runner.assert_similar_outputs(expected, [np.asarray(g) for g in got], rtol, atol,
                                  model_dir=where)
