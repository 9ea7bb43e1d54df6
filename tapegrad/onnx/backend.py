"""An ``onnx.backend.base.Backend`` on tapegrad, for ONNX's conformance suite.

``prepare(model)`` imports the graph with :func:`tapegrad.onnx.load`; the
returned rep's ``run(inputs)`` feeds NumPy arrays (one per graph input, in
order, or a dict by name) and returns NumPy arrays, computed without recording.
``supports_device`` answers ``CPU``, and ``CUDA`` when CuPy sees a GPU.

>>> from tapegrad.onnx import backend
>>> outputs = backend.prepare(model_proto).run([x])
>>> import onnx.backend.test; globals().update(onnx.backend.test.BackendTest(backend, __name__)
...     .include("test_relu").test_cases)
"""

from __future__ import annotations

from collections import namedtuple
from typing import Any

import numpy as np
import onnx
from onnx.backend.base import Backend as _OnnxBackend
from onnx.backend.base import BackendRep as _OnnxBackendRep

from ..device import cupy_available, to_host
from ..grad_mode import no_grad
from ..tensor import Tensor
from ._deps import UnsupportedOnnxError
from ._rules import checked_tensor
from .importer import _DEFAULT_DOMAINS, load

__all__ = ["Backend", "BackendRep", "prepare", "run_model", "run_node", "supports_device",
           "is_compatible"]


def _device(device: str) -> str:
    d = str(device).upper()
    if d.startswith("CUDA"):
        return "cuda" + d[4:].lower()
    if d != "CPU":
        raise UnsupportedOnnxError(f"tapegrad.onnx.backend: unknown device {device!r}; use "
                                   "'CPU' or 'CUDA'")
    return "cpu"


class BackendRep(_OnnxBackendRep):
    """A prepared graph: ``run(inputs)`` -> a tuple of NumPy arrays."""

    def __init__(self, module, device: str = "cpu"):
        self.module = module
        self.device = device

    def run(self, inputs: Any, **kwargs: Any) -> tuple:
        names = self.module.input_names
        if isinstance(inputs, dict):
            inputs = [inputs[n] for n in names]
        elif isinstance(inputs, np.ndarray) and len(names) == 1:
            inputs = [inputs]
        # NaN/inf results (log of 0, sqrt of a negative) are answers here, not warnings
        with no_grad(), np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            args = [x if isinstance(x, Tensor) else
                    checked_tensor(x, f"input {n!r}").to(self.device)
                    for n, x in zip(names, inputs)]
            out = self.module(*args)
        out = out if isinstance(out, tuple) else (out,)
        fields = [n if n.isidentifier() else f"output_{i}"
                  for i, n in enumerate(self.module.output_names)]
        row = namedtuple("Outputs", fields, rename=True)
        return row(*(to_host(o.array) for o in out))


class Backend(_OnnxBackend):
    """tapegrad as an ONNX backend (class methods, as ONNX's API has them)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        try:
            _device(device)
        except UnsupportedOnnxError:
            return False
        from ._rules import RULES

        return all(n.domain in _DEFAULT_DOMAINS and n.op_type in RULES for n in model.graph.node)

    @classmethod
    def prepare(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> BackendRep:
        dev = _device(device)
        module = load(model, check=False)
        if dev != "cpu":
            module.to(dev)
        return BackendRep(module, dev)

    @classmethod
    def run_model(cls, model: onnx.ModelProto, inputs: Any, device: str = "CPU",
                  **kwargs: Any) -> tuple:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(cls, node: onnx.NodeProto, inputs: Any, device: str = "CPU",
                 outputs_info=None, **kwargs: Any) -> tuple:
        """One node on NumPy inputs (typed from the arrays), as ONNX's API defines it."""
        from onnx import helper

        opset = kwargs.get("opset_version", onnx.defs.onnx_opset_version())
        ins = [helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(np.asarray(x).dtype), np.shape(x))
            for name, x in zip(node.input, inputs)]
        outs = [helper.make_tensor_value_info(n, onnx.TensorProto.UNDEFINED, None)
                for n in node.output if n]
        graph = helper.make_graph([node], "run_node", ins, outs)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return cls.run_model(model, list(inputs), device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        try:
            dev = _device(device)
        except UnsupportedOnnxError:
            return False
        return dev == "cpu" or cupy_available()


prepare = Backend.prepare
run_model = Backend.run_model
run_node = Backend.run_node
supports_device = Backend.supports_device
is_compatible = Backend.is_compatible
