"""``tapegrad.onnx.load`` on hostile models (tapegrad/onnx/reader.py and the size and
attribute checks of the rules): external data stays in the model's folder, tiny files
cannot allocate gigabytes, malformed graphs raise tapegrad's named errors. Every
hostile model is built here with onnx.helper; no torch."""

from __future__ import annotations

import json
import os
import selectors
import struct
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import tapegrad  # noqa: E402
import tapegrad.onnx  # noqa: E402
from tapegrad.errors import SerializationError, TapegradError  # noqa: E402
from tapegrad.onnx import UnsupportedOnnxError  # noqa: E402

N = helper.make_node
FLOAT = TensorProto.FLOAT
NAMED = (SerializationError, UnsupportedOnnxError)


def graph_model(nodes, inputs=(), outputs=(("y", FLOAT, None),), inits=(), opset=17):
    """A ModelProto without checks (hostile models fail them)."""
    ins = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    outs = [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs]
    g = helper.make_graph(nodes, "g", ins, outs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def const(name, arr):
    return N("Constant", [], [name], value=numpy_helper.from_array(np.asarray(arr), name))


def load_bytes(model, **kw):
    return tapegrad.onnx.load(model.SerializeToString(), check=False, **kw)


# ----------------------------------------------------------- external data


def external_init(location, dims=(4,), offset=None, length=None):
    t = TensorProto(name="w", data_type=FLOAT, dims=list(dims))
    t.data_location = TensorProto.EXTERNAL
    entries = {"location": location}
    if offset is not None:
        entries["offset"] = str(offset)
    if length is not None:
        entries["length"] = str(length)
    for k, v in entries.items():
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


def add_w_model(location, **kw):
    return graph_model([N("Add", ["x", "w"], ["y"])], [("x", FLOAT, [4])],
                       [("y", FLOAT, [4])], inits=[external_init(location, **kw)])


def test_external_data_from_bytes_reads_nothing_without_base_dir(tmp_path, monkeypatch):
    # before: resolved against the working directory and became a Parameter
    (tmp_path / "secret.bin").write_bytes(np.arange(4, dtype=np.float32).tobytes())
    monkeypatch.chdir(tmp_path)
    model = add_w_model("secret.bin", length=16)
    with pytest.raises(SerializationError, match=r"<bytes>.*'w'.*external.*base_dir"):
        load_bytes(model)
    with pytest.raises(SerializationError, match=r"<ModelProto>.*base_dir"):
        tapegrad.onnx.load(model, check=False)
    m = load_bytes(model, base_dir=tmp_path)  # the folder named: read from there
    np.testing.assert_array_equal(m.w.numpy(), np.arange(4, dtype=np.float32))


def test_external_data_from_a_path_stays_in_its_folder(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (tmp_path / "outside.bin").write_bytes(b"\0" * 16)
    (d / "w.bin").write_bytes(np.ones(4, np.float32).tobytes())
    os.symlink(tmp_path / "outside.bin", d / "link.bin")
    cases = {"../outside.bin": "'..'", str(tmp_path / "outside.bin"): "relative path",
             "link.bin": "outside the model's folder", "sub/../../outside.bin": "'..'"}
    for loc, why in cases.items():
        path = d / "m.onnx"
        onnx.save(add_w_model(loc, length=16), path)
        with pytest.raises(SerializationError, match=rf"m\.onnx.*{why}"):
            tapegrad.onnx.load(path, check=False)
    onnx.save(add_w_model("w.bin", length=16), d / "ok.onnx")
    m = tapegrad.onnx.load(d / "ok.onnx")
    np.testing.assert_array_equal(m.w.numpy(), np.ones(4, np.float32))


def test_external_data_must_be_a_regular_file_of_the_right_size(tmp_path):
    (tmp_path / "w.bin").write_bytes(b"\0" * 8)
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero")  # inside by name, a device in fact
    for loc, why in [("zero", "outside|not a regular"), ("fifo", "not a regular file"),
                     ("w.bin", "outside the 8-byte file"), ("missing.bin", "cannot open")]:
        with pytest.raises(SerializationError, match=why):
            load_bytes(add_w_model(loc), base_dir=tmp_path)
    with pytest.raises(SerializationError, match="needs 16 bytes"):
        load_bytes(add_w_model("w.bin", length=8), base_dir=tmp_path)
    with pytest.raises(SerializationError, match="outside"):
        load_bytes(add_w_model("w.bin", offset=4, length=16), base_dir=tmp_path)


def test_model_path_must_be_a_regular_file_within_max_bytes(tmp_path):
    with pytest.raises(SerializationError, match="/dev/zero.* is not a regular file"):
        tapegrad.onnx.load("/dev/zero")
    path = tmp_path / "m.onnx"
    onnx.save(graph_model([N("Relu", ["x"], ["y"])], [("x", FLOAT, [2])], [("y", FLOAT, [2])]),
              path)
    with pytest.raises(SerializationError, match=r"m\.onnx.*max_bytes=10"):
        tapegrad.onnx.load(path, max_bytes=10)
    with pytest.raises(SerializationError, match=r"<bytes>.*max_bytes=10"):
        tapegrad.onnx.load(path.read_bytes(), max_bytes=10)
    tapegrad.onnx.load(path)


def test_initializer_size_is_bounded_before_decoding():
    w = numpy_helper.from_array(np.zeros(1000, np.float32), "w")
    model = graph_model([N("Add", ["x", "w"], ["y"])], [("x", FLOAT, [1000])], inits=[w])
    with pytest.raises(SerializationError, match=r"initializer 'w' would hold 1000 elements "
                       r"\(4000 bytes\).*max_value_bytes=1000"):
        load_bytes(model, max_value_bytes=1000)
    load_bytes(model)


# ------------------------------------------------------------- size bombs


def bomb(nodes, out_type=FLOAT):
    return graph_model(nodes, outputs=[("y", out_type, None)])


def test_108_byte_constant_of_shape_bomb_is_refused_before_allocating():
    # before: passes onnx.checker, then 28 s and 8 GiB at load (folded)
    model = graph_model([const("s", np.array([1 << 31], np.int64)),
                         N("ConstantOfShape", ["s"], ["y"], name="cos")],
                        outputs=[("y", FLOAT, [1 << 31])])
    onnx.checker.check_model(model)
    data = model.SerializeToString()
    assert len(data) < 200
    with pytest.raises(SerializationError, match=r"<bytes>: node 'cos' \(ConstantOfShape.*"
                       r"2147483648 elements.*max_value_bytes"):
        tapegrad.onnx.load(data)
    small = graph_model([const("s", np.array([3, 2], np.int64)),
                         N("ConstantOfShape", ["s"], ["y"])], outputs=[("y", FLOAT, [3, 2])])
    assert tapegrad.onnx.load(small).forward().shape == (3, 2)


@pytest.mark.parametrize("nodes,name", [
    ([const("a", np.float32(0)), const("b", np.float32(1e12)), const("d", np.float32(1)),
      N("Range", ["a", "b", "d"], ["y"], name="n")], "Range"),
    ([const("x", np.ones((1, 1), np.float32)), const("r", np.array([10**9, 1], np.int64)),
      N("Tile", ["x", "r"], ["y"], name="n")], "Tile"),
    ([const("x", np.ones((1, 1), np.float32)), const("s", np.array([1 << 16, 1 << 16])),
      N("Expand", ["x", "s"], ["y"], name="n")], "Expand"),
    ([const("x", np.ones((1,), np.float32)), const("p", np.array([0, 1 << 30])),
      N("Pad", ["x", "p"], ["y"], name="n")], "Pad"),
    ([const("a", np.ones((1 << 15, 1), np.float32)), const("b", np.ones((1, 1 << 15),
                                                                          np.float32)),
      N("Add", ["a", "b"], ["y"], name="n")], "Add"),
])
def test_growing_constants_are_refused_before_allocating(nodes, name):
    # before: Range, Tile, Expand and Pad ran until MemoryError
    with pytest.raises(SerializationError, match=rf"node 'n' \({name}.*elements.*"
                       "max_value_bytes"):
        load_bytes(bomb(nodes), max_value_bytes=1 << 28)


def test_growth_at_run_time_is_bounded_too():
    model = graph_model([const("s", np.array([1 << 16, 1 << 16])),
                         N("Expand", ["x", "s"], ["y"], name="e")], [("x", FLOAT, [1, 1])])
    m = load_bytes(model)
    with pytest.raises(SerializationError, match=r"node 'e'.*4294967296 elements"):
        m(tapegrad.ones(1, 1))


def test_folded_values_count_towards_max_bytes():
    nodes = [const("s", np.array([1 << 20], np.int64))]
    nodes += [N("ConstantOfShape", ["s"], [f"c{i}"], name=f"c{i}") for i in range(6)]
    nodes += [N("Sum", [f"c{i}" for i in range(6)], ["y"])]
    with pytest.raises(SerializationError, match=r"node 'c4'.*max_bytes=20000000"):
        load_bytes(bomb(nodes), max_bytes=20_000_000)
    assert load_bytes(bomb(nodes)).forward().shape == (1 << 20,)


def test_tile_of_a_large_count_makes_no_list_of_copies():
    model = graph_model([const("x", np.arange(3, dtype=np.float32).reshape(1, 3)),
                         const("r", np.array([2, 3])), N("Tile", ["x", "r"], ["y"])])
    np.testing.assert_array_equal(load_bytes(model).forward().numpy(),
                                  np.tile(np.arange(3, dtype=np.float32).reshape(1, 3), (2, 3)))


# ------------------------------------------------------- malformed nodes


@pytest.mark.parametrize("start,limit,delta,why", [
    (0.0, 10.0, 0.0, "delta is 0"),  # before: ZeroDivisionError
    (0.0, np.inf, 1.0, "must be finite"),  # before: OverflowError
    (0.0, np.nan, 1.0, "must be finite"),  # before: ValueError
    (0.0, 1e30, 1e-30, "elements"),
])
def test_range_arguments_are_checked(start, limit, delta, why):
    nodes = [const("a", np.float32(start)), const("b", np.float64(limit).astype(np.float32)),
             const("d", np.float32(delta)), N("Range", ["a", "b", "d"], ["y"], name="r")]
    with pytest.raises(SerializationError, match=rf"<bytes>: node 'r' \(Range.*{why}"):
        load_bytes(bomb(nodes))


def test_range_of_ints_is_exact():
    nodes = [const("a", np.int64(2)), const("b", np.int64(-7)), const("d", np.int64(-3)),
             N("Range", ["a", "b", "d"], ["y"])]
    out = load_bytes(bomb(nodes, TensorProto.INT64)).forward().numpy()
    np.testing.assert_array_equal(out, np.arange(2, -7, -3))


def test_constant_of_shape_negative_dim():
    nodes = [const("s", np.array([2, -1], np.int64)), N("ConstantOfShape", ["s"], ["y"],
                                                       name="c")]
    with pytest.raises(SerializationError, match=r"node 'c'.*negative dim"):
        load_bytes(bomb(nodes))


@pytest.mark.parametrize("attrs,why", [
    (dict(kernel_shape=[0, 0]), "kernel_shape.*positive"),  # before: TypeError in forward
    (dict(kernel_shape=[2, 2], strides=[0, 1]), "strides.*positive"),
    (dict(kernel_shape=[2, 2], pads=[-1, 0, 0, 0]), "pads.*non-negative"),
    (dict(kernel_shape=[2, 2], pads=[0, 0]), "two values per kernel axis"),
    (dict(kernel_shape=[2, 2], auto_pad="SIDEWAYS"), "auto_pad='SIDEWAYS'"),
    (dict(kernel_shape=[2, 2], ceil_mode=7), "ceil_mode=7 must be 0 or 1"),
    (dict(kernel_shape=[2.0, 2.0]), "kernel_shape has type FLOATS.*INTS"),
    (dict(), "required attribute kernel_shape"),
])
def test_pool_attributes_are_validated_at_load(attrs, why):
    model = graph_model([N("MaxPool", ["x"], ["y"], name="p", **attrs)],
                        [("x", FLOAT, [1, 1, 4, 4])])
    with pytest.raises(NAMED, match=rf"<bytes>: node 'p' \(MaxPool.*{why}"):
        load_bytes(model)


@pytest.mark.parametrize("op,attrs,why", [
    ("LeakyRelu", dict(alpha=float("inf")), "alpha=inf must be finite"),
    ("Elu", dict(alpha=float("nan")), "must be finite"),
    ("LRN", dict(size=0), "size=0 must be positive"),
    ("Gelu", dict(approximate="erf"), "approximate='erf'"),
    ("Cast", dict(to=0), "to=0"),
    ("Cast", dict(to=999), "to=999"),
    ("Softmax", dict(axis=1.5), "axis has type FLOAT"),
])
def test_attribute_type_range_and_finiteness_at_load(op, attrs, why):
    model = graph_model([N(op, ["x"], ["y"], name="n", **attrs)], [("x", FLOAT, [1, 3, 2])],
                        opset=20)
    with pytest.raises(NAMED, match=rf"node 'n' \({op}.*{why}"):
        load_bytes(model)


def test_non_utf8_attribute_and_names():
    model = graph_model([N("Pad", ["x", "p"], ["y"], name="pad", mode="constant")],
                        [("x", FLOAT, [2])], inits=[numpy_helper.from_array(
                            np.array([1, 1]), "p")])
    data = model.SerializeToString().replace(b"constant", b"\xff\xfeonstan")
    with pytest.raises(SerializationError, match="<bytes>.*mode is not valid UTF-8"):
        tapegrad.onnx.load(data, check=False)  # before: UnicodeDecodeError
    data = model.SerializeToString().replace(b"pad", b"\xff\xfe\xfd")
    with pytest.raises(SerializationError, match="not valid UTF-8"):
        tapegrad.onnx.load(data, check=False)


@pytest.mark.parametrize("order", ["reversed", "cycle"])
def test_non_topological_or_cyclic_graphs(order):
    if order == "reversed":
        nodes = [N("Relu", ["a"], ["y"], name="second"), N("Neg", ["x"], ["a"], name="first")]
    else:
        nodes = [N("Add", ["x", "b"], ["a"], name="second"), N("Neg", ["a"], ["b"]),
                 N("Relu", ["a"], ["y"])]
    model = graph_model(nodes, [("x", FLOAT, [2])])
    # before: loaded, then KeyError in forward
    with pytest.raises(SerializationError, match="node 'second'.*topological order"):
        load_bytes(model)


def test_a_name_assigned_twice():
    model = graph_model([N("Neg", ["x"], ["y"], name="a"), N("Relu", ["x"], ["y"], name="b")],
                        [("x", FLOAT, [2])])
    with pytest.raises(SerializationError, match="node 'b'.*already defined"):
        load_bytes(model)


@pytest.mark.parametrize("mutate,why", [
    (lambda t: t.dims.__setitem__(0, 5), r"dims \[5\].*holds 16"),
    (lambda t: t.dims.__setitem__(0, -4), "negative dims"),
    (lambda t: setattr(t, "data_type", TensorProto.UNDEFINED), "element type 0"),
    (lambda t: setattr(t, "data_type", 77), "element type 77"),
    (lambda t: setattr(t, "data_type", TensorProto.DOUBLE), "holds 16"),
])
def test_initializer_dims_and_dtype_must_match_the_data(mutate, why):
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    mutate(w)
    model = graph_model([N("Add", ["x", "w"], ["y"])], [("x", FLOAT, [4])], inits=[w])
    with pytest.raises(SerializationError, match=rf"<bytes>: initializer 'w'.*{why}"):
        load_bytes(model)


def test_garbage_and_checker_failures_are_named():
    with pytest.raises(SerializationError, match="<bytes>: it is not an ONNX model"):
        tapegrad.onnx.load(b"\x08\x01\x12\xff\xff\xff\xff\x0f")
    with pytest.raises(SerializationError, match="<bytes>: it is empty"):
        tapegrad.onnx.load(b"")
    model = graph_model([N("Relu", ["x"], ["z"])], [("x", FLOAT, [2])])
    with pytest.raises(SerializationError, match="<ModelProto>: onnx.checker refuses it"):
        tapegrad.onnx.load(model)


# ------------------------------------------------------------- fuzzing

_WORKER = textwrap.dedent("""
    import json, resource, struct, sys
    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
    import tapegrad, tapegrad.onnx
    from tapegrad.errors import TapegradError
    inp, out = sys.stdin.buffer, sys.stdout
    while True:
        head = inp.read(5)
        if len(head) < 5:
            break
        n, check = struct.unpack("<IB", head)
        data = inp.read(n)
        try:
            tapegrad.onnx.load(data, check=bool(check))
            res = {"ok": True}
        except TapegradError as e:
            res = {"ok": True, "error": type(e).__name__}
        except BaseException as e:
            res = {"ok": False, "error": f"{type(e).__name__}: {e}"[:500]}
        out.write(json.dumps(res) + "\\n")
        out.flush()
""")


class _Worker:
    """A child process, capped at 3 GiB of address space, that loads models sent to it
    (a bomb fails the test, not the machine)."""

    def __init__(self):
        env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
                   MKL_NUM_THREADS="1")
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env)

    def load(self, data: bytes, check: bool, timeout: float = 60.0) -> dict:
        self.proc.stdin.write(struct.pack("<IB", len(data), check) + data)
        self.proc.stdin.flush()
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout):
            self.proc.kill()
            raise AssertionError(f"load did not finish within {timeout} s")
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"the loader died (exit status {self.proc.wait()})")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def worker():
    w = _Worker()
    yield w
    w.close()


def _seed_models():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    conv = graph_model(
        [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
         N("Relu", ["c"], ["r"]), N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2],
                                   strides=[2, 2]),
         N("Shape", ["p"], ["s"]), N("Gather", ["s", "i0"], ["n"], axis=0),
         N("Unsqueeze", ["n", "ax"], ["n1"]), N("Concat", ["n1", "m1"], ["shape"], axis=0),
         N("Reshape", ["p", "shape"], ["f"]), N("Gemm", ["f", "fw", "fb"], ["y"], transB=1)],
        [("x", FLOAT, [2, 1, 4, 4])], [("y", FLOAT, [2, 3])],
        inits=[numpy_helper.from_array(a, n) for n, a in [
            ("w", w), ("b", np.zeros(4, np.float32)), ("i0", np.array(0)),
            ("ax", np.array([0])), ("m1", np.array([-1])),
            ("fw", rng.standard_normal((3, 16)).astype(np.float32)),
            ("fb", np.zeros(3, np.float32))]])
    consts = graph_model(
        [const("s", np.array([2, 3], np.int64)), N("ConstantOfShape", ["s"], ["z"]),
         const("a", np.float32(0)), const("lim", np.float32(3)), const("d", np.float32(1)),
         N("Range", ["a", "lim", "d"], ["r"]), N("Add", ["z", "r"], ["t"]),
         const("reps", np.array([2, 1])), N("Tile", ["t", "reps"], ["u"]),
         const("pads", np.array([0, 1, 0, 1])), N("Pad", ["u", "pads"], ["v"]),
         const("e", np.array([2, 4, 5])), N("Expand", ["v", "e"], ["y"])],
        outputs=[("y", FLOAT, [2, 4, 5])])
    return [conv, consts]


_SEEDS = _seed_models()
_VALUES = [0, 1, -1, 2, 3, -(2 ** 31), 2 ** 31, 2 ** 62, -(2 ** 63) + 1]
_FLOATS = [0.0, -1.0, 1e30, float("inf"), float("-inf"), float("nan")]


@st.composite
def mutated_models(draw):
    model = onnx.ModelProto()
    model.CopyFrom(draw(st.sampled_from(_SEEDS)))
    g = model.graph
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["attr", "dims", "dtype", "order", "input", "int_data",
                                     "opset"]))
        if kind == "attr":
            attrs = [a for n in g.node for a in n.attribute]
            a = draw(st.sampled_from(attrs))
            if a.type == onnx.AttributeProto.INTS and len(a.ints):
                a.ints[draw(st.integers(0, len(a.ints) - 1))] = draw(st.sampled_from(_VALUES))
            elif a.type == onnx.AttributeProto.INT:
                a.i = draw(st.sampled_from(_VALUES))
            elif a.type == onnx.AttributeProto.TENSOR and a.t.raw_data:
                try:
                    arr = numpy_helper.to_array(a.t).copy()
                except Exception:  # noqa: BLE001 - mutated already
                    arr = np.zeros(0)
                if arr.size:
                    flat = arr.reshape(-1)
                    pool = _FLOATS if arr.dtype.kind == "f" else _VALUES
                    v = draw(st.sampled_from(pool))
                    with np.errstate(all="ignore"):
                        flat[draw(st.integers(0, flat.size - 1))] = np.array(v).astype(arr.dtype)
                    a.t.raw_data = arr.tobytes()
            a.type = draw(st.sampled_from([a.type, a.type, 0, 1, 2, 7]))
        elif kind == "dims":
            tensors = list(g.initializer) + [a.t for n in g.node for a in n.attribute
                                             if a.type == onnx.AttributeProto.TENSOR]
            if tensors:
                t = draw(st.sampled_from(tensors))
                if len(t.dims):
                    t.dims[draw(st.integers(0, len(t.dims) - 1))] = \
                        draw(st.sampled_from([0, 2, -1, 2 ** 31, 2 ** 40]))
                else:
                    t.dims.append(draw(st.sampled_from([0, 3, 2 ** 40])))
        elif kind == "dtype":
            tensors = list(g.initializer) + [a.t for n in g.node for a in n.attribute
                                             if a.type == onnx.AttributeProto.TENSOR]
            if tensors:
                draw(st.sampled_from(tensors)).data_type = draw(st.integers(0, 30))
        elif kind == "order":
            nodes = list(g.node)
            perm = draw(st.permutations(range(len(nodes))))
            copies = [onnx.NodeProto() for _ in nodes]
            for c, i in zip(copies, perm):
                c.CopyFrom(nodes[i])
            del g.node[:]
            g.node.extend(copies)
        elif kind == "input":
            node = draw(st.sampled_from(list(g.node)))
            if len(node.input):
                names = [o for n in g.node for o in n.output] + ["", "nope"]
                node.input[draw(st.integers(0, len(node.input) - 1))] = \
                    draw(st.sampled_from(names))
        elif kind == "int_data" and len(g.initializer):
            t = draw(st.sampled_from(list(g.initializer)))
            t.int64_data.extend([draw(st.sampled_from(_VALUES))])
        elif kind == "opset":
            model.opset_import[0].version = draw(st.sampled_from([1, 6, 11, 13, 20, 0, 9999]))
    return model


@given(model=mutated_models(), check=st.booleans())
def test_mutated_protos_load_or_raise_named_errors(worker, model, check):
    res = worker.load(model.SerializeToString(), check)
    assert res["ok"], res["error"]


@given(seed=st.sampled_from(range(len(_SEEDS))), data=st.data())
def test_mutated_bytes_load_or_raise_named_errors(worker, seed, data):
    raw = bytearray(_SEEDS[seed].SerializeToString())
    for _ in range(data.draw(st.integers(1, 8))):
        op = data.draw(st.sampled_from(["flip", "byte", "cut", "dup"]))
        i = data.draw(st.integers(0, len(raw) - 1))
        if op == "flip":
            raw[i] ^= 1 << data.draw(st.integers(0, 7))
        elif op == "byte":
            raw[i] = data.draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFF]))
        elif op == "cut":
            del raw[i:]
            raw += b"\x00" if not raw else b""
        else:
            j = data.draw(st.integers(i, min(len(raw), i + 16)))
            raw[i:i] = raw[i:j]
    res = worker.load(bytes(raw), data.draw(st.booleans()))
    assert res["ok"], res["error"]


def test_seed_models_load(worker):
    # the fuzzing starts from models that load (and the worker reports real failures)
    for m in _SEEDS:
        assert tapegrad.onnx.load(m) is not None
        assert worker.load(m.SerializeToString(), True) == {"ok": True}
    assert worker.load(b"\xff\xff\xff", False)["error"] == "SerializationError"
    assert isinstance(SerializationError("x"), TapegradError)
