"""``tapegrad.onnx.export``: trace a module's forward and write it as ONNX.
(The module is ``exporter``, as ``importer`` holds ``load``: a submodule named
``export`` would shadow the function on the package once imported.)

The forward runs once on the example input under :class:`.trace.trace` (in
eval mode, without recording a tape); each recorded op is turned into ONNX
nodes by its mapping (``export_ops.py``, ``export_layers.py``), parameters and
buffers become initializers named by their ``state_dict`` names, constants an
op captured become initializers too, and the example input is the graph input.
Ops without an exact ONNX counterpart raise :class:`OnnxExportError` naming
the op, its input shapes and dtypes, and what to do.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..errors import ArgumentError, ArgumentTypeError, describe
from ..grad_mode import no_grad
from ..tensor import Tensor
from ._deps import require_onnx
from .export_check import check_constants
from .export_graph import Call, Graph, OnnxExportError, lookup
from .trace import Alias, aliased_reads, needed, trace, value_ids

__all__ = ["export", "OnnxExportError"]

BATCH = "batch"  # the symbolic name of the batch dimension


def export(model, example_input, path, opset: int = 17, dynamic_batch: bool = True,
           input_names: Sequence[str] | None = None,
           output_names: Sequence[str] | None = None):
    """Write ``model`` (a ``tapegrad.nn.Module`` or any callable of Tensors) as an
    ONNX file at ``path`` (a path, or None to only return it) and return the
    ``onnx.ModelProto``. ``example_input`` is a Tensor (or a tuple of them);
    with ``dynamic_batch`` axis 0 of every input and output is the symbolic
    ``batch``. The model runs in eval mode (its mode is restored after).

    >>> tapegrad.onnx.export(model, tapegrad.randn(2, 1, 8, 8), "lenet.onnx")
    """
    require_onnx("tapegrad.onnx.export")
    import onnx

    if not isinstance(opset, int) or not 13 <= opset <= _max_opset(onnx):
        raise ArgumentError(f"tapegrad.onnx.export: opset must be an int in [13, "
                            f"{_max_opset(onnx)}], got {opset!r}")
    inputs = _as_inputs(example_input)
    in_names = _names("input_names", input_names, len(inputs), "input")
    training = getattr(model, "training", None)
    if training is not None:
        # every submodule's own flag (a frozen BatchNorm kept in eval inside a
        # training model stays so: model.train(True) alone would flip it)
        modes = [(m, m.training) for m in model.modules()] if hasattr(model, "modules") \
            else [(model, training)]
        model.eval()
    try:
        records, outs, params, traced = _trace(model, inputs)
        out_names = _names("output_names", output_names, len(outs), "output")
        g = Graph(onnx, opset, bool(dynamic_batch), params)
        for t, name in zip(inputs, in_names):
            g.bind(t, name, 0 if g.dynamic else None)
        for rec in records:
            _emit(g, rec)
        # after the mappings, so that an op they refuse is named as such
        check_constants(model, inputs, records, traced)
    finally:
        if training is not None:
            for m, mode in modes:
                m.__dict__["training"] = mode
    proto = _model(onnx, g, inputs, in_names, outs, out_names)
    onnx.checker.check_model(proto, full_check=True)
    if path is not None:
        onnx.save(proto, os.fspath(path))
    return proto


def _max_opset(onnx) -> int:
    return onnx.defs.onnx_opset_version()


def _as_inputs(example_input) -> tuple:
    items = example_input if isinstance(example_input, (tuple, list)) else (example_input,)
    out = []
    for i, t in enumerate(items):
        if isinstance(t, np.ndarray):
            t = Tensor(t)
        if not isinstance(t, Tensor):
            raise ArgumentTypeError(f"tapegrad.onnx.export: example input {i} must be a Tensor "
                                    f"(or a NumPy array), got {type(t).__name__}")
        out.append(t)
    if not out:
        raise ArgumentError("tapegrad.onnx.export: needs at least one example input")
    return tuple(out)


def _names(what, given, n, stem):
    if given is None:
        return [stem] if n == 1 else [f"{stem}_{i}" for i in range(n)]
    names = [str(s) for s in given]
    if len(names) != n or len(set(names)) != n:
        raise ArgumentError(f"tapegrad.onnx.export: {what} must be {n} distinct names (one per "
                            f"{stem}), got {list(given)!r}")
    return names


def _trace(model, inputs):
    """Trace one forward (the model is in eval mode): the records the outputs
    need, the outputs, ``{id: state_dict name}`` of the parameters and buffers,
    and the ids of every traced value and parameter."""
    params: dict[int, str] = {}
    state = model.state_dict(keep_vars=True) if hasattr(model, "state_dict") else {}
    for name, t in state.items():
        params.setdefault(id(t), name)
        params.setdefault(id(t.array), name)
    # a forward that writes its own parameters or buffers in place (x += ..., copy_)
    # cannot be a stateless graph, whose initializers would hold the updated values
    versions = [(name, t, t._version[0]) for name, t in state.items() if isinstance(t, Tensor)]
    with no_grad(), trace() as tr:
        out = model(*inputs)
    changed = [name for name, t, v in versions if t._version[0] != v]
    if changed:
        raise OnnxExportError(
            f"ONNX export: the forward updates the model's state in place ({', '.join(changed)}"
            "; the traced call has already changed it), and an ONNX graph holds no state: "
            "its initializers would be the updated values. Keep state updates out of the "
            "forward in eval mode (or compute them out of place and return them).")
    outs = _outputs(out)
    traced = set(params) | {i for t in inputs for i in value_ids(t)}
    traced.update(i for r in tr.records if not isinstance(r, Alias) for i in value_ids(r.outputs))
    records = needed(tr.records, outs)
    hit = aliased_reads(tr.records, outs, records)
    if hit is not None:
        alias, other = hit
        raise OnnxExportError(
            f"ONNX export: an in-place update of a tensor {describe(alias.target)} also "
            f"changes a view (or base) {describe(other)} of its memory that the forward reads "
            "afterwards; an ONNX graph has no shared memory, so that read would see the old "
            "values. Use an out-of-place op (y = y + 1) or .clone() before the update.")
    return records, outs, params, traced


def _outputs(out) -> tuple:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    for i, t in enumerate(outs):
        if not isinstance(t, Tensor):
            raise ArgumentTypeError(f"tapegrad.onnx.export: the model's output {i} is a "
                                    f"{type(t).__name__}; export needs Tensors (or a tuple of "
                                    "them) as outputs")
    return tuple(outs)


def _emit(g: Graph, rec) -> None:
    if isinstance(rec, Alias):  # x += y: x is y's value from now on
        name = g.value(rec.source)
        g.names[id(rec.target)] = name
        g.names[id(rec.target.array)] = name
        return
    fn = lookup(rec.fn)
    if fn is None:
        shapes = describe(*(a for a in rec.args if hasattr(a, "shape"))) or "no tensors"
        raise OnnxExportError(
            f"ONNX export: op {rec.fn.__name__} (inputs {shapes}) has no ONNX mapping. "
            "Replace it in the model by ops that have one (see the README's list of "
            "exportable ops), or register a mapping with "
            "tapegrad.onnx.export_graph.mapping(its Function class).")
    call = Call(g, rec.fn, rec.args, rec.params, rec.outputs)
    fn(g, call)
    batch = call.batch_out
    if batch is None:
        first = next((b for v in _tensor_args(call.a) if (b := g.batch_of(v)) is not None), None)
        batch = [first if first is not None and first < t.ndim else None for t in call.outs]
    for t, name, b in zip(call.outs, call.out_names, batch):
        g.bind(t, name, b if g.dynamic else None)


def _tensor_args(a: dict):
    for v in a.values():
        if isinstance(v, tuple):
            yield from (t for t in v if isinstance(t, Tensor) or hasattr(t, "shape"))
        elif isinstance(v, Tensor) or hasattr(v, "shape"):
            yield v


def _value_info(onnx, name, shape, dtype, batch):
    dims: list[Any] = list(shape)
    if batch is not None:
        dims[batch] = BATCH
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return onnx.helper.make_tensor_value_info(name, elem, dims)


def _model(onnx, g, inputs, in_names, outs, out_names):
    """The ModelProto: graph inputs, outputs (renamed to ``out_names``), nodes."""
    produced = {o for n in g.nodes for o in n.output}
    rename = {}
    for t, want in zip(outs, out_names):
        name = g.value(t)
        if name in produced and name not in rename and name not in in_names:
            rename[name] = want
        else:  # an input, an initializer, or a value given out twice: copy it
            g.node("Identity", [name], [want])
    for node in g.nodes:
        node.input[:] = [rename.get(i, i) for i in node.input]
        node.output[:] = [rename.get(o, o) for o in node.output]
    ins = [_value_info(onnx, n, t.shape, t.dtype, 0 if g.dynamic else None)
           for t, n in zip(inputs, in_names)]
    outputs = []
    for t, want in zip(outs, out_names):
        batch = g.batch_of(t)
        outputs.append(_value_info(onnx, want, t.shape, t.dtype, batch if g.dynamic else None))
    graph = onnx.helper.make_graph(g.nodes, "tapegrad", ins, outputs,
                                   initializer=list(g.inits.values()))
    from .. import __version__

    proto = onnx.helper.make_model(graph, producer_name="tapegrad", producer_version=__version__,
                                   opset_imports=[onnx.helper.make_opsetid("", g.opset)])
    # the oldest IR version that has this opset: runtimes older than this onnx read it
    proto.ir_version = onnx.helper.find_min_ir_version_for(list(proto.opset_import))
    return proto


from . import export_layers, export_ops, export_shape  # noqa: E402, F401  (register the mappings)
