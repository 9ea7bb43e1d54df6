"""Reading and writing Caffe's files within bounded memory.

* ``.prototxt`` (text format): :func:`read_net` parses it with protobuf's
  ``text_format`` into a ``NetParameter`` and upgrades it as Caffe's
  ``upgrade_proto.cpp`` does: V1 ``layers { type: CONVOLUTION }`` become
  ``layer { type: "Convolution" }`` (``blobs_lr``/``weight_decay``/``param`` become
  ``param { lr_mult decay_mult name }``), the old net-level ``input`` with
  ``input_dim`` / ``input_shape`` becomes a first ``Input`` layer, and BatchNorm
  layers with three ``param`` get ``lr_mult: 0, decay_mult: 0``. V0 nets (2014,
  ``layers { layer { ... } }``) are refused with :class:`CaffeFileError`.
* ``.caffemodel`` (binary): :func:`read_weights` walks the wire format itself
  (:mod:`.wire`), so memory stays within the file's size plus its arrays. The file's
  size is checked against ``max_bytes`` (:data:`MAX_BYTES`) before it is read; each
  blob's declared shape (``shape``, or the legacy ``num/channels/height/width``)
  must hold exactly as many values as its ``data`` / ``double_data`` (Caffe's
  ``Blob::FromProto`` check), so nothing is allocated from a declared size.
* :func:`write_weights` writes a ``.caffemodel`` Caffe's ``ReadProtoFromBinaryFile``
  accepts: each layer's ``LayerParameter`` with its blobs (``shape`` + packed ``data``).

Every malformed, truncated or oversized file raises :class:`CaffeFileError`.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

import numpy as np

from ...errors import ArgumentError
from . import wire
from .schema import messages
from .wire import CaffeFileError, Malformed

__all__ = ["CaffeFileError", "MAX_BYTES", "MAX_AXES", "BlobData", "LayerBlobs", "read_net",
           "parse_net", "read_weights", "write_weights", "upgrade_net", "legacy_shape_equal"]

MAX_BYTES = 1 << 30
"""Default ``max_bytes``: the largest ``.caffemodel`` or ``.prototxt`` read (1 GiB;
VGG-16's caffemodel is 528 MB). Pass ``max_bytes=`` to read a larger file you trust."""
MAX_AXES = 32
"""Caffe's ``kMaxBlobAxes``: a blob has at most 32 axes."""

V1_TYPES = {
    0: "", 35: "AbsVal", 1: "Accuracy", 30: "ArgMax", 2: "BNLL", 3: "Concat",
    37: "ContrastiveLoss", 4: "Convolution", 5: "Data", 39: "Deconvolution", 6: "Dropout",
    32: "DummyData", 7: "EuclideanLoss", 25: "Eltwise", 38: "Exp", 8: "Flatten", 9: "HDF5Data",
    10: "HDF5Output", 28: "HingeLoss", 11: "Im2col", 12: "ImageData", 13: "InfogainLoss",
    14: "InnerProduct", 15: "LRN", 29: "MemoryData", 16: "MultinomialLogisticLoss", 34: "MVN",
    17: "Pooling", 26: "Power", 18: "ReLU", 19: "Sigmoid", 27: "SigmoidCrossEntropyLoss",
    36: "Silence", 20: "Softmax", 21: "SoftmaxWithLoss", 22: "Split", 33: "Slice", 23: "TanH",
    24: "WindowData", 31: "Threshold",
}
"""V1LayerParameter.LayerType -> the layer's type string (Caffe's UpgradeV1LayerType)."""


def _check_limit(max_bytes, op):
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes < 0:
        raise ArgumentError(f"{op}: max_bytes must be a non-negative int, got {max_bytes!r}")


def locate(path: str, root, exists=os.path.exists) -> str | None:
    """Where a path a Caffe file names is: as given (absolute, or relative to the working
    directory, as Caffe opens it) when ``exists`` says so, else under ``root`` (a relative
    one); None when neither."""
    if exists(path):
        return path
    if root and not os.path.isabs(path) and exists(os.path.join(root, path)):
        return os.path.join(root, path)
    return None


def _read_bytes(source, max_bytes: int, what: str, op: str) -> tuple[bytes, str]:
    """The bytes of a path or a binary file object, refusing more than max_bytes
    before reading them."""
    _check_limit(max_bytes, op)
    if hasattr(source, "read"):
        where = getattr(source, "name", f"the {what} file object")
        data = source.read(max_bytes + 1)
        if isinstance(data, str):
            data = data.encode()
    else:
        where = os.fspath(source)
        try:
            size = os.path.getsize(where)
        except OSError as e:
            raise CaffeFileError(f"{op}: cannot read the {what} {where!r}: {e}") from e
        if size > max_bytes:
            raise CaffeFileError(f"{op}: {where!r} is {size} bytes, more than max_bytes="
                                 f"{max_bytes}; if you trust the file, pass a larger "
                                 f"{op}(..., max_bytes=...)")
        with open(where, "rb") as f:
            data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise CaffeFileError(f"{op}: {where!r} holds more than max_bytes={max_bytes} bytes; "
                             f"if you trust it, pass a larger {op}(..., max_bytes=...)")
    return data, str(where)


# ----------------------------------------------------------------------- prototxt


def parse_net(text: str, where: str = "<text>"):
    """A ``NetParameter`` from prototxt text, upgraded (see the module notes)."""
    from google.protobuf import text_format

    net = messages().NetParameter()
    try:
        text_format.Parse(text, net)
    except text_format.ParseError as e:
        hint = ""
        if "ceil_mode" in str(e):
            hint = (" (ceil_mode is a field of Caffe's forks; BVLC Caffe spells it "
                    "round_mode: CEIL or round_mode: FLOOR)")
        raise CaffeFileError(f"read_net: {where} is not a valid Caffe prototxt: {e}{hint}") \
            from None
    return upgrade_net(net, where)


def read_net(source, max_bytes: int = MAX_BYTES):
    """A ``NetParameter`` from a ``.prototxt`` path or text file object (or a
    ``NetParameter`` message, copied), upgraded as Caffe does."""
    if hasattr(source, "DESCRIPTOR") and source.DESCRIPTOR.name == "NetParameter":
        net = messages().NetParameter()
        net.MergeFromString(source.SerializeToString())
        return upgrade_net(net, "the NetParameter")
    data, where = _read_bytes(source, max_bytes, "prototxt", "read_net")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CaffeFileError(f"read_net: {where!r} is not UTF-8 text ({e}); a binary "
                             ".caffemodel goes in the weights argument") from None
    return parse_net(text, repr(where))


def upgrade_net(net, where: str = "the net"):
    """Upgrade ``net`` in place as Caffe's ``UpgradeNetAsNeeded`` does (V1 layers, the
    old input fields, BatchNorm's three params); returns it."""
    m = messages()
    if len(net.layers):
        if len(net.layer):
            raise CaffeFileError(f"{where}: has both 'layer' and the deprecated 'layers' "
                                 "fields; Caffe refuses such a net too: write every layer "
                                 "as layer { type: \"...\" }")
        for v1 in net.layers:
            if v1.HasField("layer"):
                raise CaffeFileError(
                    f"{where}: is a V0 network (layers {{ layer {{ ... }} }}, before 2014), "
                    "which tapegrad does not upgrade; convert it with Caffe's "
                    "upgrade_net_proto_text / upgrade_net_proto_binary tools")
            _upgrade_v1(v1, net.layer.add(), m)
        net.ClearField("layers")
    if len(net.input):
        _upgrade_input(net, where)
    for lp in net.layer:
        if lp.type == "BatchNorm" and len(lp.param) == 3:
            for p in lp.param:
                p.lr_mult = 0.0
                p.decay_mult = 0.0
    return net


def _upgrade_v1(v1, lp, m):
    lp.bottom.extend(v1.bottom)
    lp.top.extend(v1.top)
    if v1.HasField("name"):
        lp.name = v1.name
    lp.include.extend(v1.include)
    lp.exclude.extend(v1.exclude)
    if v1.HasField("type"):
        if v1.type not in V1_TYPES:
            raise CaffeFileError(f"layer {v1.name!r}: unknown V1 layer type {v1.type}")
        lp.type = V1_TYPES[v1.type]
    lp.blobs.extend(v1.blobs)
    specs = (("name", v1.param), ("share_mode", v1.blob_share_mode), ("lr_mult", v1.blobs_lr),
             ("decay_mult", v1.weight_decay))
    for attr, values in specs:
        for i, v in enumerate(values):
            while len(lp.param) <= i:
                lp.param.add()
            setattr(lp.param[i], attr, v)
    lp.loss_weight.extend(v1.loss_weight)
    lp_fields = lp.DESCRIPTOR.fields_by_name
    for fd, value in v1.ListFields():
        if fd.name.endswith("_param") and fd.name in lp_fields:
            getattr(lp, fd.name).CopyFrom(value)


def _upgrade_input(net, where):
    """``input: "data" input_dim: 1 ...`` -> a first layer ``Input`` (Caffe's
    UpgradeNetInput). Without any shape the Input's shapes come from the first feed."""
    names = list(net.input)
    shapes = []
    if len(net.input_shape):
        shapes = [list(s.dim) for s in net.input_shape]
    elif len(net.input_dim):
        dims = list(net.input_dim)
        if len(dims) != 4 * len(names):
            raise CaffeFileError(f"{where}: {len(names)} inputs need {4 * len(names)} "
                                 f"input_dim values (num, channels, height, width each), "
                                 f"got {len(dims)}")
        shapes = [dims[4 * i:4 * i + 4] for i in range(len(names))]
    if shapes and len(shapes) != len(names):
        raise CaffeFileError(f"{where}: {len(names)} inputs but {len(shapes)} input_shape")
    layers = list(net.layer)
    net.ClearField("layer")
    lp = net.layer.add(name="input", type="Input")
    lp.top.extend(names)
    for s in shapes:
        lp.input_param.shape.add().dim.extend(s)
    net.layer.extend(layers)
    for name in ("input", "input_shape", "input_dim"):
        net.ClearField(name)


# --------------------------------------------------------------------- caffemodel


@dataclass
class BlobData:
    """One blob read from a caffemodel: ``array`` (float32, in ``shape``) and whether
    the shape came from the legacy ``num/channels/height/width`` fields."""

    array: np.ndarray
    legacy: bool = False


@dataclass
class LayerBlobs:
    name: str
    type: str
    blobs: list = field(default_factory=list)


def read_weights(source, max_bytes: int = MAX_BYTES) -> list[LayerBlobs]:
    """The layers (name, type, blobs) of a ``.caffemodel`` path or binary file object,
    read within ``max_bytes`` (:data:`MAX_BYTES`). Current (``layer``), V1 (``layers``)
    and V0 files are read; ``.h5`` weights are refused."""
    if not hasattr(source, "read") and os.fspath(source).endswith((".h5", ".hdf5")):
        raise CaffeFileError(f"read_weights: {os.fspath(source)!r} is Caffe's HDF5 weight "
                             "format, which tapegrad does not read; save the net as a "
                             "binary .caffemodel (snapshot_format: BINARYPROTO)")
    buf, where = _read_bytes(source, max_bytes, "caffemodel", "read_weights")
    try:
        return _net_blobs(buf, len(buf))
    except Malformed as e:
        raise CaffeFileError(f"read_weights: {where!r} is not a readable .caffemodel: {e}") \
            from None


def _text(buf, lo, hi, what):
    try:
        return bytes(buf[lo:hi]).decode("utf-8")
    except UnicodeDecodeError:
        raise Malformed(f"{what} is not UTF-8") from None


# where each kind of layer message keeps its name, type and blobs
_LAYER = {"layer": (1, 2, 7), "v1": (4, 5, 6), "v0": (1, 2, 50)}


def _net_blobs(buf, end):
    layers = []
    for number, wt, value in wire.fields(buf, 0, end):
        if number == 100 and wt == wire.LENGTH:
            layers.append(_layer(buf, *value, "layer"))
        elif number == 2 and wt == wire.LENGTH:
            layers.append(_layer(buf, *value, "v1"))
    return layers


def _layer(buf, lo, hi, kind):
    name_f, type_f, blobs_f = _LAYER[kind]
    out = LayerBlobs("", "")
    where = "a layer"
    for number, wt, value in wire.fields(buf, lo, hi):
        if number == name_f and wt == wire.LENGTH:
            out.name = _text(buf, *value, "a layer name")
            where = f"layer {out.name!r}"
        elif number == type_f and kind == "v1" and wt == wire.VARINT:
            out.type = V1_TYPES.get(value, f"V1 type {value}")
        elif number == type_f and wt == wire.LENGTH:
            out.type = _text(buf, *value, "a layer type")
        elif number == blobs_f and wt == wire.LENGTH:
            out.blobs.append(_blob(buf, *value, f"{where} blob {len(out.blobs)}"))
        elif number == 1 and kind == "v1" and wt == wire.LENGTH:  # a V0 layer inside
            inner = _layer(buf, *value, "v0")
            out.name = out.name or inner.name
            out.type = out.type or inner.type
            out.blobs.extend(inner.blobs)
    return out


def _blob(buf, lo, hi, where):
    dims, legacy = None, {}
    chunks = {"data": [], "double_data": []}
    for number, wt, value in wire.fields(buf, lo, hi):
        if number == 7 and wt == wire.LENGTH:  # shape: BlobShape { repeated int64 dim = 1 }
            dims = [] if dims is None else dims
            for n2, wt2, v2 in wire.fields(buf, *value):
                if n2 != 1:
                    continue
                if wt2 == wire.LENGTH:
                    dims.extend(wire.signed64(d) for d in
                                wire.packed_varints(buf, *v2, MAX_AXES))
                elif wt2 == wire.VARINT:
                    dims.append(wire.signed64(v2))
                if len(dims) > MAX_AXES:
                    raise Malformed(f"{where} has more than {MAX_AXES} axes")
        elif number in (5, 8):
            kind, size = ("data", 4) if number == 5 else ("double_data", 8)
            if wt == wire.LENGTH:
                chunks[kind].append(wire.packed_numbers(buf, *value, "<f4" if size == 4
                                                        else "<f8", f"{where} {kind}"))
            elif wt == (wire.FIXED32 if size == 4 else wire.FIXED64):
                chunks[kind].append(bytes(buf[value[0]:value[1]]))
        elif number in (1, 2, 3, 4) and wt == wire.VARINT:
            legacy[number] = wire.signed64(value)
    if legacy:  # Caffe's FromProto: the legacy 4-D fields win when any is set
        shape = [legacy.get(i, 0) for i in (1, 2, 3, 4)]
    else:
        shape = dims or []
    if any(d < 0 for d in shape):
        raise Malformed(f"{where} has a negative dimension in shape {shape}")
    count = math.prod(shape)
    if chunks["double_data"]:
        raw, dtype = b"".join(chunks["double_data"]), "<f8"
    else:
        raw, dtype = b"".join(chunks["data"]), "<f4"
    have = len(raw) // np.dtype(dtype).itemsize
    if count != have:
        raise Malformed(f"{where} declares shape {tuple(shape)} ({count} values) but holds "
                        f"{have} values")
    arr = np.frombuffer(raw, dtype=dtype).astype(np.float32).reshape(shape)
    return BlobData(arr, legacy=bool(legacy))


def legacy_shape_equal(blob: BlobData, shape) -> bool:
    """Caffe's ``Blob::ShapeEquals``: a legacy 4-D blob matches a shape of at most 4
    axes padded with leading 1s (a bias ``(N,)`` is stored as ``1 x 1 x 1 x N``)."""
    shape = tuple(int(s) for s in shape)
    if not blob.legacy:
        return tuple(blob.array.shape) == shape
    return len(shape) <= 4 and (1,) * (4 - len(shape)) + shape == tuple(blob.array.shape)


# ------------------------------------------------------------------------ writing


def _blob_bytes(a) -> bytes:
    a = np.ascontiguousarray(a, dtype="<f4")
    dims = b"".join(wire.varint_bytes(int(d)) for d in a.shape)
    shape = wire.field_bytes(1, dims) if a.ndim else b""
    return wire.field_bytes(7, shape) + (wire.field_bytes(5, a.tobytes()) if a.size else b"")


def write_weights(path, layers, name: str = "") -> None:
    """Write a ``.caffemodel``: ``layers`` is a sequence of ``(layer, arrays)`` where
    ``layer`` is a ``LayerParameter`` (written without its ``blobs``) and ``arrays``
    the blobs' NumPy arrays, written with ``shape`` and packed float ``data``."""
    parts = [wire.field_bytes(1, name.encode())] if name else []
    for lp, arrays in layers:
        head = lp.__class__()
        head.CopyFrom(lp)
        head.ClearField("blobs")
        body = head.SerializeToString() + b"".join(
            wire.field_bytes(7, _blob_bytes(a)) for a in arrays)
        parts.append(wire.field_bytes(100, body))
    with open(os.fspath(path), "wb") as f:
        for p in parts:
            f.write(p)
