"""``tapegrad.onnx.load`` (this module is ``importer``: a submodule named ``load``
would shadow the function): an ONNX graph as a trainable :class:`tapegrad.nn.Module`.

Import happens once, at load time:

* the file, its external data and its tensors are read by :mod:`.reader`,
  every size checked against the limits before anything is allocated;
* every node is matched to its rule in :mod:`tapegrad.onnx._rules` (registered
  by the ``ops_*`` modules); an unknown operator, domain, attribute or attribute
  value is refused there, naming the node;
* float initializers become ``nn.Parameter``s, except those a rule takes as a
  static value (a shape, pads, clip bounds: host constants) or as a buffer
  (batch norm's running statistics); integer initializers are constants;
* every node whose inputs are all constants (``Constant``, ``ConstantOfShape``
  of a constant shape, ``Shape``/``Gather``/``Slice`` of constants, ...) is
  evaluated once and its outputs kept as constants (constant folding);
* what is left is a straight list of steps that ``forward`` runs with
  tapegrad ops, so the tape records it and ``loss.backward()`` reaches the
  Parameters. ``Shape`` of a value computed at run time (a dynamic batch size)
  gives a host int64 array there, so ``Shape -> Gather -> Concat -> Reshape``
  chains work for any batch size.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import nn
from ..device import get_device
from ..errors import ArgumentError, DTypeError, ShapeError, TapegradError
from ..grad_mode import no_grad
from ..tensor import Tensor, tensor
from . import (  # noqa: F401 - they fill RULES
    ops_index,
    ops_logic,
    ops_math,
    ops_nn,
    ops_pool,
    ops_shape,
    reader,
)
from ._deps import UnsupportedOnnxError
from ._rules import RULES, Limits, NodeInfo, checked_tensor
from .reader import MAX_BYTES, MAX_VALUE_BYTES

__all__ = ["load", "OnnxModule", "MAX_BYTES", "MAX_VALUE_BYTES"]

_DEFAULT_DOMAINS = ("", "ai.onnx")


def _node_info(node, opset, index, lim, base_dir):
    if node.domain not in _DEFAULT_DOMAINS:
        raise UnsupportedOnnxError(f"tapegrad.onnx: {lim.source}: node {node.name!r} "
                                   f"({node.op_type}) is in domain {node.domain!r}; only the "
                                   "default ONNX domain is supported")
    name = node.name or f"{node.op_type}_{index}"
    rule = RULES.get(node.op_type)
    if rule is None:
        raise UnsupportedOnnxError(
            f"tapegrad.onnx: {lim.source}: node {name!r}: operator {node.op_type} (opset "
            f"{opset}) is not supported; supported operators: {', '.join(sorted(RULES))}")
    info = NodeInfo(name, node.op_type, opset, {}, len(node.output), lim)
    label = info.label()
    for a in node.attribute:
        if a.name not in rule.attrs:
            value = reader.attr_value(node, a, label, lim, base_dir)
            raise info.refuse_attr(a.name, value, "tapegrad does not implement this attribute")
    reader.check_schema(node, label, lim, opset)
    info.attrs.update({a.name: reader.attr_value(node, a, label, lim, base_dir)
                       for a in node.attribute})
    if rule.check is not None:
        rule.check(info)
    return rule, info


def _param_name(onnx_name, taken):
    """A Module attribute name for an initializer (no '.'), unique."""
    base = onnx_name.replace(".", "_") or "param"
    name, i = base, 1
    while name in taken:
        name, i = f"{base}_{i}", i + 1
    taken.add(name)
    return name


class _Step:
    __slots__ = ("rule", "info", "inputs", "outputs", "free")

    def __init__(self, rule, info, inputs, outputs):
        self.rule, self.info, self.inputs, self.outputs = rule, info, inputs, outputs
        self.free = ()  # names whose last use is this step


def _run(step, args):
    try:
        if step.rule.size is not None:
            count = step.rule.size(step.info, *args)
            if count is not None:
                dtypes = [a.dtype for a in args if isinstance(a, Tensor)]
                step.info.check_size(count, max(dtypes, key=lambda d: d.itemsize)
                                     if dtypes else np.float64)
        out = step.rule.fn(step.info, *args)
    except UnsupportedOnnxError:
        raise
    except TapegradError as e:
        if step.info.label() in str(e):
            raise  # the rule's own error names the node already
        # the op's own message, prefixed with the node it came from
        raise type(e)(f"tapegrad.onnx: {step.info.label()}: {e}") from e
    outs = out if isinstance(out, tuple) else (out,)
    used = [i for i, n in enumerate(step.outputs) if n]
    if used and used[-1] >= len(outs):
        raise step.info.unsupported(f"output {used[-1]} ({step.outputs[used[-1]]!r})")
    return outs


def _as_input(rule, j, v, device=None):
    """A rule's view of one argument: host arrays in static slots, Tensors elsewhere
    (on ``device``: values a rule made on the host, e.g. a ``Shape``, join the
    module's device when the module is not on the CPU)."""
    if v is None:
        return v
    if j in rule.static:
        return v.array if isinstance(v, Tensor) else v
    if device is not None and v.device is not device:
        return v.to(device)
    return v


_OWN_ATTRS = {"training", "graph_name", "input_names", "output_names", "onnx_names",
              "_steps", "_input_types", "_consts", "_device", "_parameters", "_buffers",
              "_modules", "_non_persistent"}


class OnnxModule(nn.Module):
    """An imported ONNX graph: ``forward(*inputs)`` runs its nodes with tapegrad ops.

    ``onnx_names`` maps each Parameter's and buffer's attribute name to its ONNX
    initializer name (a ``.`` becomes ``_``, a clash gets a ``_1`` suffix);
    ``input_names``/``output_names`` are the graph's. The graph's semantics are
    fixed at export: Dropout stays the identity and BatchNormalization uses its
    running statistics in ``train()`` mode too (fine-tuning trains the weights,
    as PyTorch's frozen-BN fine-tuning); ``to(device)`` moves everything.

    >>> m = tapegrad.onnx.load("model.onnx"); y = m(x)
    """

    def __init__(self, graph_name, steps, inputs, outputs, params, buffers, consts, onnx_names):
        super().__init__()
        for attr, p in params.items():
            self.register_parameter(attr, p)
        for attr, b in buffers.items():
            self.register_buffer(attr, b)
        d = self.__dict__
        d["graph_name"] = graph_name
        d["_steps"] = steps
        d["input_names"] = [n for n, _ in inputs]
        d["_input_types"] = inputs
        d["output_names"] = list(outputs)
        d["_consts"] = consts
        d["onnx_names"] = dict(onnx_names)
        d["_device"] = None  # None: the CPU, where every value starts
        self.eval()

    def forward(self, *inputs):
        if len(inputs) != len(self.input_names):
            raise ArgumentError(f"{self.graph_name}: the graph takes {len(self.input_names)} "
                                f"input(s) {self.input_names}, got {len(inputs)}")
        env = dict(self._consts)
        dev = self._device
        params, buffers = self._parameters, self._buffers
        for attr, onnx_name in self.onnx_names.items():
            env[onnx_name] = params[attr] if attr in params else buffers[attr]
        for (name, (dtype, rank)), x in zip(self._input_types, inputs):
            env[name] = _check_input(self.graph_name, name, x, dtype, rank)
        for step in self._steps:
            args = [None if not n else env[n] for n in step.inputs]
            args = [_as_input(step.rule, j, v, dev) for j, v in enumerate(args)]
            for name, v in zip(step.outputs, _run(step, args)):
                if name:
                    env[name] = v
            for name in step.free:
                env.pop(name, None)
        outs = tuple(env[n] for n in self.output_names)
        return outs[0] if len(outs) == 1 else outs

    def to(self, device=None, dtype=None):
        super().to(device, dtype)
        if device is not None:
            dev = get_device(device)
            self.__dict__["_consts"] = {k: v.to(dev) for k, v in self._consts.items()}
            self.__dict__["_device"] = None if dev.type == "cpu" else dev
        return self

    def extra_repr(self) -> str:
        return (f"graph={self.graph_name!r}, nodes={len(self._steps)}, "
                f"inputs={self.input_names}, outputs={self.output_names}")


def _check_input(graph, name, x, dtype, rank):
    if not isinstance(x, Tensor):
        x = checked_tensor(x, f"input {name!r}")
    if dtype is not None and x.dtype != dtype:
        raise DTypeError(f"{graph}: input {name!r} must be {dtype}, got {x.dtype}; cast it "
                         f"(e.g. x.to(dtype=tapegrad.{dtype}))")
    if rank is not None and x.ndim != rank:
        raise ShapeError(f"{graph}: input {name!r} must have {rank} axes, got shape "
                         f"{tuple(x.shape)}")
    return x


def load(model: Any, *, check: bool = True, base_dir=None, max_bytes: int = MAX_BYTES,
         max_value_bytes: int = MAX_VALUE_BYTES) -> OnnxModule:
    """An ONNX model (path, bytes or ``onnx.ModelProto``) as an :class:`OnnxModule`.

    ``check`` runs ``onnx.checker.check_model`` first. Models come from strangers,
    so load reads them defensively (:mod:`tapegrad.onnx.reader`): external data
    only from regular files inside the model's folder (for bytes and protos, only
    when ``base_dir`` names that folder), sizes checked before anything is
    allocated or folded. Raise the limits for a model you trust:

    - ``max_bytes`` (:data:`MAX_BYTES`, 1 GiB): the file, its external data and
      the values constant folding computes, in total;
    - ``max_value_bytes`` (:data:`MAX_VALUE_BYTES`, 1 GiB): any one value, at
      load and, for nodes whose output outgrows their inputs, at run time.

    A malformed or oversized model raises :class:`tapegrad.errors.SerializationError`
    (or :class:`UnsupportedOnnxError`) naming the model, the node and the problem.

    >>> m = tapegrad.onnx.load("squeezenet.onnx"); y = m(x)   # x (1, 3, 224, 224)
    """
    lim = Limits(reader.source_of(model), max_bytes, max_value_bytes)
    try:
        return _load(model, check, base_dir, lim)
    except TapegradError:
        raise
    except RecursionError as exc:
        raise lim.bad("it is nested too deeply to read") from exc
    except Exception as exc:  # noqa: BLE001 - whatever else a malformed model makes onnx raise
        raise lim.bad(f"it is malformed ({type(exc).__name__}: {exc})") from exc


def _load(model, check, base_dir, lim):
    import onnx

    proto, base = reader.read_proto(model, lim, base_dir)
    g = proto.graph
    reader.check_names(lim, g)
    # initializers first: their external data is read here, from the model's folder only
    inits = {}
    for t in g.initializer:
        if t.name in inits:
            raise lim.bad(f"it has two initializers named {t.name!r}")
        inits[t.name] = reader.tensor_array(t, f"initializer {t.name!r}", lim, base)
    if check:
        try:
            onnx.checker.check_model(reader.checkable(proto, inits))
        except onnx.checker.ValidationError as exc:
            raise lim.bad(f"onnx.checker refuses it: {exc}") from exc
    opset = reader.opset_of(proto, lim, _DEFAULT_DOMAINS)
    if len(g.sparse_initializer):
        raise UnsupportedOnnxError(f"tapegrad.onnx: {lim.source}: sparse initializers are "
                                   "not supported")
    nodes = [_node_info(n, opset, i, lim, base) for i, n in enumerate(g.node)]

    # how each initializer is used decides what it becomes
    static_use, buffer_use = set(), set()
    for node, (rule, _) in zip(g.node, nodes):
        for j, name in enumerate(node.input):
            if j in rule.static:
                static_use.add(name)
            elif j in rule.buffers:
                buffer_use.add(name)
    # attribute names stay clear of the module's own (forward, to, training, ...)
    taken, params, buffers, onnx_names = set(dir(OnnxModule)) | _OWN_ATTRS, {}, {}, {}
    consts = {}
    for name, arr in inits.items():
        if arr.dtype.kind != "f" or name in static_use:
            consts[name] = checked_tensor(arr, f"initializer {name!r}")
        elif name in buffer_use:
            attr = _param_name(name, taken)
            buffers[attr] = checked_tensor(arr, f"initializer {name!r}")
            onnx_names[attr] = name
        else:
            attr = _param_name(name, taken)
            params[attr] = nn.Parameter(checked_tensor(arr, f"initializer {name!r}"))
            onnx_names[attr] = name

    inputs = [(vi.name, reader.value_type(lim, vi)) for vi in g.input if vi.name not in inits]
    defined = set(inits) | {n for n, _ in inputs}
    steps = []
    with no_grad():
        for node, (rule, info) in zip(g.node, nodes):
            ins, outs = list(node.input), list(node.output)
            _check_order(lim, info, ins, outs, defined)
            if all(not n or n in consts for n in ins):
                _fold(lim, rule, info, ins, outs, consts)
            else:
                steps.append(_Step(rule, info, ins, outs))
    outputs = [vi.name for vi in g.output]
    for n in outputs:
        if n not in defined:
            raise lim.bad(f"graph output {n!r} is never produced")
    _plan_frees(steps, outputs)
    # constants only the folding needed are dropped
    live = {n for s in steps for n in s.inputs} | set(outputs)
    consts = {k: v for k, v in consts.items() if k in live}
    return OnnxModule(g.name or "onnx graph", steps, inputs, outputs, params, buffers, consts,
                      onnx_names)


def _check_order(lim, info, ins, outs, defined):
    """Nodes come in topological order and assign each name once (ONNX's rule;
    ``check=False`` skips the checker, not this)."""
    for n in ins:
        if n and n not in defined:
            raise lim.bad(f"{info.label()} reads {n!r} before any node, initializer or graph "
                          "input defines it (the nodes are not in topological order, the "
                          "graph has a cycle, or the value is missing)")
    for n in outs:
        if n and n in defined:
            raise lim.bad(f"{info.label()} writes {n!r}, which is already defined (ONNX "
                          "assigns each name once)")
        if n:
            defined.add(n)


def _fold(lim, rule, info, ins, outs, consts):
    """Evaluate a node of constants once, counting its outputs towards ``max_bytes``."""
    args = [None if not n else consts[n] for n in ins]
    args = [_as_input(rule, j, v) for j, v in enumerate(args)]
    lim.folding = True
    try:
        vals = _run(_Step(rule, info, ins, outs), args)
    except TapegradError:
        raise
    except Exception as exc:  # noqa: BLE001 - a rule's raw error on hostile constants
        raise info.bad(f"fails on its constant inputs ({type(exc).__name__}: {exc})") from exc
    finally:
        lim.folding = False
    for name, v in zip(outs, vals):
        if name:
            v = v if isinstance(v, Tensor) else tensor(v)
            nbytes = int(v.array.nbytes)
            lim.check_value(int(v.array.size), v.array.itemsize, f"{info.label()}: output {name!r}")
            lim.spend(nbytes, f"{info.label()}: output {name!r}")
            consts[name] = v


def _plan_frees(steps, outputs):
    """Mark on each step the values read for the last time there (kept: outputs)."""
    last = {}
    for i, s in enumerate(steps):
        for n in s.inputs:
            if n:
                last[n] = i
    keep = set(outputs)
    for i, s in enumerate(steps):
        s.free = tuple(n for n in dict.fromkeys(s.inputs) if n and last[n] == i
                       and n not in keep)
