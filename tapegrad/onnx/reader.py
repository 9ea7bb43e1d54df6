"""Reading an ONNX model from a stranger: the file, its external data, its tensors
and attributes, each checked before anything is allocated.

ONNX files are shared like checkpoints (model zoos, hubs), so ``load`` reads them
as :func:`tapegrad.load` reads checkpoints:

* the model file must be a regular file of at most ``max_bytes``; bytes and
  ``ModelProto``s are measured the same way;
* external data is read by tapegrad, never by ``onnx``: only from regular files
  inside the model's own folder (``base_dir=`` for bytes and protos, which
  otherwise may hold none); absolute locations, ``..`` and symlinks that leave
  the folder are refused, and each tensor's ``offset``/``length`` must lie in
  its file and match its dims;
* a tensor's dims, dtype and data must agree, and its size is checked against
  ``max_value_bytes`` before it is decoded;
* names and string attributes must be UTF-8.

Every problem raises :class:`tapegrad.errors.SerializationError` (or
:class:`UnsupportedOnnxError` for a well-formed feature tapegrad lacks) naming
the model (its path, ``"<bytes>"`` or ``"<ModelProto>"``) and what is wrong.
"""

from __future__ import annotations

import math
import os
import stat

import numpy as np

from ..errors import ArgumentError
from ._deps import UnsupportedOnnxError
from ._rules import Limits

MAX_BYTES = 1 << 30
"""Default ``max_bytes`` of ``tapegrad.onnx.load``: the model file, its external data
and the values folded at load time, in total."""
MAX_VALUE_BYTES = 1 << 30
"""Default ``max_value_bytes`` of ``tapegrad.onnx.load``: any one value it makes (an
initializer, a constant, a folded value; at run time the output of a node that grows
past its inputs: ConstantOfShape, Range, Tile, Expand, Pad, broadcasting, MatMul)."""

# ONNX element type -> (NumPy dtype, the TensorProto field holding typed data)
_DTYPES = {1: (np.float32, "float_data"), 2: (np.uint8, "int32_data"),
           3: (np.int8, "int32_data"), 4: (np.uint16, "int32_data"),
           5: (np.int16, "int32_data"), 6: (np.int32, "int32_data"),
           7: (np.int64, "int64_data"), 9: (np.bool_, "int32_data"),
           10: (np.float16, "int32_data"), 11: (np.float64, "double_data"),
           12: (np.uint32, "uint64_data"), 13: (np.uint64, "uint64_data")}
_CHUNK = 1 << 20


def source_of(model) -> str:
    """How errors name the model."""
    if isinstance(model, (str, os.PathLike)):
        return os.fspath(model)
    if isinstance(model, (bytes, bytearray, memoryview)):
        return "<bytes>"
    return "<ModelProto>"


def read_proto(model, lim: Limits, base_dir):
    """``(ModelProto, folder its external data may come from, or None)``."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        lim.spend(model.ByteSize(), "the ModelProto")
        return model, _base(base_dir)
    if isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
        folder = _base(base_dir)
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        data = _read_file(lim, path, lim.max_bytes - lim.used, "the model file")
        folder = _base(base_dir) if base_dir is not None else \
            os.path.dirname(os.path.abspath(path))
    else:
        raise ArgumentError(f"tapegrad.onnx.load: expected a path, bytes or onnx.ModelProto, "
                            f"got {type(model).__name__}")
    lim.spend(len(data), "the model")
    if not data:
        raise lim.bad("it is empty")
    try:
        proto = onnx.load_model_from_string(data)
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and friends
        raise lim.bad(f"it is not an ONNX model ({type(exc).__name__}: {exc})") from exc
    return proto, folder


def _base(base_dir):
    return None if base_dir is None else os.path.realpath(os.fspath(base_dir))


def _read_file(lim, path, limit, what, offset=0, length=None):
    """Up to ``limit`` bytes of a regular file (never a device, FIFO or folder)."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise lim.bad(f"cannot open {what} {path!r}: {exc.strerror or exc}") from exc
    with os.fdopen(fd, "rb", buffering=0) as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise lim.bad(f"{what} {path!r} is not a regular file")
        size = st.st_size
        if length is None:
            length = size - offset
        if offset > size or offset + length > size:
            raise lim.bad(f"{what} {path!r}: bytes [{offset}, {offset + length}) lie outside "
                          f"the {size}-byte file")
        if length > limit:
            raise lim.bad(f"{what} {path!r} has {length} bytes, more than the "
                          f"{limit} left of max_bytes={lim.max_bytes}; if you trust the "
                          "model, pass a larger tapegrad.onnx.load(..., max_bytes=...)")
        fh.seek(offset)
        buf = bytearray(length)
        view, pos = memoryview(buf), 0
        while pos < length:
            n = fh.readinto(view[pos:pos + _CHUNK])
            if not n:
                raise lim.bad(f"{what} {path!r} ends early (truncated while read?)")
            pos += n
    return bytes(buf)


def check_text(lim: Limits, value, what: str) -> str:
    """A string field of the proto (protobuf hands back bytes for invalid UTF-8)."""
    if isinstance(value, str):
        return value
    raise lim.bad(f"{what} {value[:40]!r} is not valid UTF-8")


def check_names(lim: Limits, graph) -> None:
    """Every name and type string of the graph is text."""
    for i, node in enumerate(graph.node):
        for field in ("name", "op_type", "domain"):
            check_text(lim, getattr(node, field), f"node {i}'s {field}")
        for n in (*node.input, *node.output):
            check_text(lim, n, f"node {i}'s input/output name")
        for a in node.attribute:
            check_text(lim, a.name, f"node {i}'s attribute name")
    for t in graph.initializer:
        check_text(lim, t.name, "an initializer name")
    for vi in (*graph.input, *graph.output):
        check_text(lim, vi.name, "a graph input/output name")
    check_text(lim, graph.name, "the graph name")


def tensor_array(t, what: str, lim: Limits, base_dir) -> np.ndarray:
    """The array of a TensorProto, its dims, dtype and data checked first (and its
    external data read from inside ``base_dir`` only)."""
    from onnx import TensorProto, numpy_helper

    dims = list(t.dims)
    if any(d < 0 for d in dims):
        raise lim.bad(f"{what} has negative dims {dims}")
    count = math.prod(dims)
    kind = t.data_type
    if kind not in _DTYPES:
        name = TensorProto.DataType.Name(kind) if kind in TensorProto.DataType.values() \
            else None
        if name is None or kind == TensorProto.UNDEFINED:
            raise lim.bad(f"{what} has element type {kind} ({name or 'unknown'}), which is "
                          "not a tensor dtype")
        raise UnsupportedOnnxError(f"tapegrad.onnx: {lim.source}: {what} has dtype {name}, "
                                   "which tapegrad does not hold (bool, ints, float16/32/64 "
                                   "only)")
    dtype, field = _DTYPES[kind]
    dtype = np.dtype(dtype)
    lim.check_value(count, dtype.itemsize, what)
    if t.HasField("segment"):
        raise UnsupportedOnnxError(f"tapegrad.onnx: {lim.source}: {what} is a segment of a "
                                   "tensor, which is not supported")
    if t.data_location == TensorProto.EXTERNAL:
        raw = _external(t, what, lim, base_dir, count * dtype.itemsize)
        t2 = TensorProto()
        t2.name, t2.data_type = t.name, t.data_type
        t2.dims.extend(dims)
        t2.raw_data = raw
        t = t2
    elif t.data_location != TensorProto.DEFAULT:
        raise lim.bad(f"{what} has data_location {t.data_location}")
    elif t.external_data:
        raise lim.bad(f"{what} lists external data but is not stored externally")
    fields = [f for f in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                          "uint64_data", "string_data") if len(getattr(t, f))]
    if t.HasField("raw_data"):
        held, want = len(t.raw_data), count * dtype.itemsize
        if len(fields) > 1:
            raise lim.bad(f"{what} holds both raw_data and {fields[1]}")
    else:
        if fields and fields != [field]:
            raise lim.bad(f"{what} ({dtype}) holds its data in {fields}, not {field}")
        held, want = len(getattr(t, field)), count
    if held != want:
        raise lim.bad(f"{what} declares dims {dims} of {dtype} ({want} "
                      f"{'bytes' if t.HasField('raw_data') else 'values'}) but holds {held}")
    return numpy_helper.to_array(t)


def checkable(proto, inits):
    """``proto`` for ``onnx.checker``: with external initializers given the data read
    (the checker would look for their files relative to the working directory)."""
    from onnx import TensorProto, numpy_helper

    external = [i for i, t in enumerate(proto.graph.initializer)
                if t.data_location == TensorProto.EXTERNAL]
    if not external:
        return proto
    copy = type(proto)()
    copy.CopyFrom(proto)
    for i in external:
        t = copy.graph.initializer[i]
        t.CopyFrom(numpy_helper.from_array(inits[t.name], t.name))
    return copy


def _external(t, what, lim, base_dir, nbytes):
    """The bytes of an external tensor, from a regular file inside ``base_dir``."""
    if base_dir is None:
        raise lim.bad(f"{what} is stored in an external file, and a model given as bytes or "
                      "a ModelProto reads none; pass tapegrad.onnx.load(..., base_dir=the "
                      "model's folder) if you trust it")
    info = {}
    for e in t.external_data:
        key = check_text(lim, e.key, f"{what}: an external_data key")
        info[key] = check_text(lim, e.value, f"{what}: external_data {key!r}")
    unknown = set(info) - {"location", "offset", "length", "checksum", "basepath"}
    if unknown:
        raise lim.bad(f"{what} has unknown external_data keys {sorted(unknown)}")
    loc = info.get("location", "")
    parts = loc.replace("\\", "/").split("/")
    if not loc or "\x00" in loc or os.path.isabs(loc) or loc.startswith(("/", "\\")) or \
            ".." in parts or (len(loc) > 1 and loc[1] == ":"):
        raise lim.bad(f"{what} has external data location {loc!r}: it must be a relative "
                      "path inside the model's folder, without '..'")
    path = os.path.realpath(os.path.join(base_dir, loc))
    if os.path.commonpath([path, base_dir]) != base_dir:
        raise lim.bad(f"{what}'s external data {loc!r} resolves to {path!r}, outside the "
                      f"model's folder {base_dir!r} (a symlink?)")
    try:
        offset = int(info.get("offset", 0))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise lim.bad(f"{what} has a non-integer external data offset/length "
                      f"{info.get('offset')!r}/{info.get('length')!r}") from None
    if offset < 0 or (length is not None and length != nbytes):
        raise lim.bad(f"{what} needs {nbytes} bytes of external data, but its entry says "
                      f"offset {offset}, length {length}")
    data = _read_file(lim, path, lim.max_bytes - lim.used, f"{what}'s external data",
                      offset, nbytes)
    lim.spend(len(data), f"{what}'s external data")
    return data


# ------------------------------------------------------------- attributes

# 0/1 attributes: anything else is refused rather than read as "true"
_FLAGS = frozenset(("allowzero", "broadcast", "ceil_mode", "count_include_pad",
                    "detect_negative", "detect_positive", "exclusive", "fmod", "is_test",
                    "keepdims", "largest", "noop_with_empty_axes", "reverse", "saturate",
                    "select_last_index", "sorted", "spatial", "storage_order", "training_mode",
                    "transA", "transB", "upper"))
# float attributes that may be infinite (a bound, a fill value); NaN never is
_MAY_BE_INF = {("Clip", "min"), ("Clip", "max"), ("Pad", "value")}
_SINGLE = {1: "f", 2: "i", 3: "s", 4: "t"}  # FLOAT, INT, STRING, TENSOR: the field set


def attr_value(node, a, label: str, lim: Limits, base_dir):
    """The Python value of attribute ``a`` (tensors checked like initializers)."""
    import onnx
    from onnx import AttributeProto as A

    kind = a.type
    if kind in (A.GRAPH, A.GRAPHS, A.SPARSE_TENSOR, A.SPARSE_TENSORS, A.TYPE_PROTO,
                A.TYPE_PROTOS):
        raise UnsupportedOnnxError(
            f"tapegrad.onnx: {label}: attribute {a.name} of type "
            f"{A.AttributeType.Name(kind)} (subgraphs, sparse tensors, type protos) is not "
            "supported")
    if kind in _SINGLE and not a.HasField(_SINGLE[kind]):
        raise lim.bad(f"{label}: attribute {a.name} is declared {A.AttributeType.Name(kind)} "
                      "but holds no such value")
    if kind == A.TENSOR:
        return tensor_array(a.t, f"{label}: attribute {a.name}", lim, base_dir)
    if kind == A.TENSORS:
        return [tensor_array(t, f"{label}: attribute {a.name}", lim, base_dir)
                for t in a.tensors]
    if kind not in (A.FLOAT, A.INT, A.STRING, A.FLOATS, A.INTS, A.STRINGS):
        raise lim.bad(f"{label}: attribute {a.name} has type {kind}, which ONNX does not "
                      "define")
    v = onnx.helper.get_attribute_value(a)
    if kind in (A.STRING, A.STRINGS):
        try:
            return v.decode() if kind == A.STRING else [s.decode() for s in v]
        except UnicodeDecodeError:
            raise lim.bad(f"{label}: attribute {a.name} is not valid UTF-8") from None
    if kind in (A.FLOAT, A.FLOATS) and node.op_type != "Constant":
        vals = [v] if kind == A.FLOAT else v
        inf_ok = (node.op_type, a.name) in _MAY_BE_INF
        if any(math.isnan(x) or (math.isinf(x) and not inf_ok) for x in vals):
            raise lim.bad(f"{label}: attribute {a.name}={v!r} must be finite")
    if kind == A.INT and a.name in _FLAGS and v not in (0, 1):
        raise lim.bad(f"{label}: attribute {a.name}={v!r} must be 0 or 1")
    return v


_SCHEMAS: dict = {}


def check_schema(node, label: str, lim: Limits, opset: int) -> None:
    """Attribute types and required attributes as ONNX's schema of the node's
    opset declares them (with ``check=False`` too); unknown schemas are left to
    the rule."""
    import onnx

    key = (node.op_type, opset)
    if key not in _SCHEMAS:
        try:
            _SCHEMAS[key] = onnx.defs.get_schema(node.op_type, opset, "")
        except Exception:  # noqa: BLE001 - SchemaError: not defined at this opset
            _SCHEMAS[key] = None
    schema = _SCHEMAS[key]
    if schema is None:
        return
    n_in = len(node.input)
    if not schema.min_input <= n_in <= schema.max_input:
        raise lim.bad(f"{label}: {n_in} inputs, but {node.op_type}-{schema.since_version} "
                      f"takes {schema.min_input} to {schema.max_input}")
    if len(node.output) > schema.max_output:
        raise lim.bad(f"{label}: {len(node.output)} outputs, but {node.op_type}-"
                      f"{schema.since_version} has at most {schema.max_output}")
    single = onnx.defs.OpSchema.FormalParameterOption.Single
    for formal, name in zip(schema.inputs, node.input):
        if not name and formal.option == single:
            raise lim.bad(f"{label}: the required input {formal.name!r} is omitted")
    given = {a.name: a for a in node.attribute}
    if len(given) != len(node.attribute):
        raise lim.bad(f"{label}: an attribute is given twice")
    for name, spec in schema.attributes.items():
        a = given.get(name)
        if a is None:
            if spec.required:
                raise lim.bad(f"{label}: the required attribute {name} is missing")
        elif int(a.type) != int(spec.type):
            names = onnx.AttributeProto.AttributeType
            got = names.Name(a.type) if a.type in names.values() else a.type
            raise lim.bad(f"{label}: attribute {name} has type {got}, but {node.op_type}-"
                          f"{schema.since_version} declares {names.Name(int(spec.type))}")


def opset_of(proto, lim: Limits, domains) -> int:
    opsets = [o.version for o in proto.opset_import if o.domain in domains]
    opset = max(opsets, default=1)
    if not 1 <= opset <= 1000:
        raise lim.bad(f"it imports the default ONNX domain at opset {opset}")
    return opset


def value_type(lim: Limits, vi):
    """(dtype or None, rank or None) that a graph input declares."""
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is None:
        raise UnsupportedOnnxError(f"tapegrad.onnx: {lim.source}: graph input {vi.name!r} is "
                                   "not a tensor (sequences, maps and optionals are not "
                                   "supported)")
    kind = tt.elem_type
    if kind and kind not in _DTYPES:
        raise UnsupportedOnnxError(f"tapegrad.onnx: {lim.source}: graph input {vi.name!r} has "
                                   f"element type {kind}, which tapegrad does not hold")
    dtype = np.dtype(_DTYPES[kind][0]) if kind else None
    rank = len(tt.shape.dim) if tt.HasField("shape") else None
    return dtype, rank


def onnx_dtype(code) -> np.dtype | None:
    """The NumPy dtype of an ONNX element type tapegrad holds, else None."""
    entry = _DTYPES.get(code) if isinstance(code, int) else None
    return None if entry is None else np.dtype(entry[0])
