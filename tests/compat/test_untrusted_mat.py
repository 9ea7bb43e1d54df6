"""load_simplenn on hostile .mat files: nothing outside the file is opened, no
declared size is allocated beyond the limits, and every malformed input raises
a named tapegrad error naming the file (tapegrad/compat/_matcheck.py,
_mat_v5.py, _mat_v73.py, and the layer checks of matconvnet_layers.py)."""

from __future__ import annotations

import os
import select
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest
from hypothesis import given, reject
from hypothesis import strategies as st

pytest.importorskip("scipy.io")

from matlab_files import cell, save_v5, save_v73  # noqa: E402

from tapegrad import errors  # noqa: E402
from tapegrad.compat.matconvnet import load_simplenn  # noqa: E402

Named = errors.SerializationError  # MatFileError, the loader's own, is one


def layers_of(**conv_fields):
    """A small valid network: conv (pad), relu, pool, softmaxloss."""
    w = np.arange(18, dtype=np.float32).reshape(3, 3, 1, 2) / 10
    return cell({"type": "conv", "name": "conv1", "weights": cell(w, np.zeros((1, 2), np.float32)),
                 "pad": np.array([[1.0]]), "stride": np.array([[1.0]]), **conv_fields},
                {"type": "relu", "name": "relu1"},
                {"type": "pool", "name": "pool1", "method": "max", "pool": np.array([[2.0, 2.0]]),
                 "stride": np.array([[2.0]]), "pad": np.array([[0.0]])},
                {"type": "softmaxloss", "name": "loss"})


def refused(path, match, **limits):
    with pytest.raises(Named, match=match) as info:
        load_simplenn(path, **limits)
    assert os.fspath(path) in str(info.value)  # the message names the file
    return str(info.value)


# ------------------------------------------------------- hand-made v5 files
# MATLAB's level-5 format: 8-byte tags (type, bytes), data padded to 8 bytes.


def _el(kind, data):
    return struct.pack("<II", kind, len(data)) + data + b"\0" * (-len(data) % 8)


def _matrix(cls, dims, body=b"", name=b""):
    return _el(14, _el(6, struct.pack("<II", cls, 0)) + _el(5, struct.pack(f"<{len(dims)}i", *dims))
               + _el(1, name) + body)


def _double(dims, name=b""):
    return _matrix(6, dims, _el(9, np.zeros(int(np.prod(dims)), "<f8").tobytes()), name)


def _struct(dims, fields, name=b""):
    """``fields``: name -> the element of each struct element (one struct here)."""
    names = b"".join(k.encode().ljust(32, b"\0") for k in fields)
    return _matrix(2, dims, _el(5, struct.pack("<i", 32)) + _el(1, names)
                   + b"".join(fields.values()), name)


def _v5(*elements):
    head = b"MATLAB 5.0 MAT-file, written by tapegrad's tests".ljust(116, b" ")
    return head + b"\0" * 8 + struct.pack("<H", 0x0100) + b"IM" + b"".join(elements)


def _char(data, n, kind=16):
    return _matrix(4, (1, n), _el(kind, data))


def _relu_net(name_element=None):
    relu = _struct((1, 1), {"type": _char(b"relu", 4),
                            **({"name": name_element} if name_element else {})})
    return _v5(_matrix(1, (1, 1), relu, b"layers"))


def test_handmade_v5_files_are_read(tmp_path):
    path = tmp_path / "net.mat"
    path.write_bytes(_relu_net(_char(b"r\xc3\xa9lu", 4)))  # UTF-8: 'rélu'
    net = load_simplenn(path)
    assert [la.type for la in net.layers] == ["relu"] and net.layers[0].name == "rélu"


def _bomb(inflated, declared=None):
    """A compressed variable ``big`` (a double column) inflating to ``inflated``
    bytes of zeros (a multiple of 16 MiB) after its header, its tag declaring
    ``declared`` (default: the truth): one deflate block of 16 MiB of zeros
    repeated (byte-aligned by full flushes), so a GiB costs milliseconds."""
    n, block_size = inflated // 8, 1 << 24
    assert inflated % block_size == 0
    body = _matrix(6, (n, 1), struct.pack("<II", 9, n * 8), b"big")[8:]
    head = struct.pack("<II", 14, len(body) + n * 8 if declared is None else declared)
    c = zlib.compressobj(9)
    start = c.compress(head + body) + c.flush(zlib.Z_FULL_FLUSH)
    zeros = bytes(block_size)
    block = c.compress(zeros) + c.flush(zlib.Z_FULL_FLUSH)
    end = c.flush()  # the final empty block, then the Adler-32 of all that was inflated
    check = zlib.adler32(head + body)
    for _ in range(inflated // block_size):
        check = zlib.adler32(zeros, check)
    z = start + block * (inflated // block_size) + end[:-4] + struct.pack(">I", check)
    return struct.pack("<II", 15, len(z)) + z  # no padding after a compressed element


def test_v5_zlib_bomb_refused_without_inflating_it(tmp_path):
    path = tmp_path / "bomb.mat"
    path.write_bytes(_v5(_bomb(1104 << 20)))  # ~1 MB that inflates to 1.1 GB
    assert path.stat().st_size < 2 << 20
    refused(path, r"holds 11576\d+ bytes.*max_bytes=1073741824")  # the default limit
    # a lying tag (declares 64 bytes): inflation stops at what it declares
    path.write_bytes(_v5(_bomb(64 << 20, declared=64)))
    refused(path, "inflates to more than the 72 bytes its tag declares")
    # a bomb within a raised limit loads (as an unused variable beside a network)
    good = tmp_path / "good.mat"
    save_v5(good, layers=layers_of())
    path.write_bytes(good.read_bytes() + _bomb(32 << 20))
    refused(path, "max_bytes=1000000", max_bytes=1_000_000)
    assert len(load_simplenn(path, max_bytes=64 << 20).layers) == 4


@pytest.mark.parametrize("case", ["empty", "short", "truncated", "corrupt zlib", "v4",
                                  "deep cells", "bad utf8", "huge fieldless struct",
                                  "huge char rows", "sparse"])
def test_v5_malformed_files_named(tmp_path, case):
    path = tmp_path / "x.mat"
    good = tmp_path / "good.mat"
    save_v5(good, layers=layers_of())
    if case == "empty":
        path.write_bytes(b"")
        refused(path, "the file is empty")
        return
    if case == "short":
        path.write_bytes(b"MATLAB 5.0")
        refused(path, "shorter than a MAT-file's 128-byte header")
        return
    if case == "truncated":
        path.write_bytes(good.read_bytes()[:700])
        refused(path, "truncated")
        return
    if case == "corrupt zlib":
        z = zlib.compress(_double((1, 1)))
        path.write_bytes(_v5(_el(15, z[:-4] + bytes(4))))  # a wrong checksum
        refused(path, "corrupt")
        return
    if case == "v4":
        path.write_bytes(struct.pack("<5i", 0, 1, 1, 0, 2) + b"x\0" + b"\0" * 8 + b"\0" * 120)
        refused(path, "not a MATLAB v5 or v7.3")
        return
    if case == "deep cells":  # 400 levels: RecursionError before the limit existed
        v = np.ones((1, 1))
        for _ in range(400):
            v = cell(v)
        save_v5(path, layers=layers_of(), meta=v)
        refused(path, "nested more than max_depth=100")
        return
    if case == "bad utf8":  # a field name that is not UTF-8: UnicodeDecodeError in scipy
        names = b"\xff\xfe".ljust(32, b"\0")
        path.write_bytes(_v5(_matrix(2, (1, 1), _el(5, struct.pack("<i", 32)) + _el(1, names)
                                     + _char(b"relu", 4), b"layers")))
        refused(path, "UnicodeDecodeError")
        return

    if case == "huge fieldless struct":  # 2^30 structs in 100 bytes
        path.write_bytes(_v5(_struct((1, 1 << 30), {}, b"layers")))
        refused(path, r"1x1073741824 struct\) declares 1073741824 elements.*max_items")
        return
    if case == "huge char rows":  # 2 MB of chars, 2M one-char rows: 120 MB of str
        path.write_bytes(_v5(_matrix(4, (2_000_000, 1), _el(16, b"a" * 2_000_000), b"layers")))
        refused(path, "char array.*max_items=1000000")
        return
    scipy_sparse = pytest.importorskip("scipy.sparse")
    save_v5(path, layers=layers_of(), meta=scipy_sparse.eye(3, format="csc"))
    refused(path, "sparse array")


# ------------------------------------------------------------- v7.3 files


def _filters_name(f):
    """The HDF5 name of conv1's filter bank in a file from save_v73."""
    layer = f[f["layers"][0, 0]]
    return f[layer["weights"][0, 0]].name


def _v73(tmp_path, edit, name="net.mat", **variables):
    h5py = pytest.importorskip("h5py")
    path = tmp_path / name
    save_v73(path, layers=layers_of(), **variables)
    with h5py.File(path, "r+") as f:
        edit(h5py, f, tmp_path)
    return path


def _replace(f, name, make):
    cls = f[name].attrs["MATLAB_class"]
    del f[name]
    ds = make(name)
    ds.attrs["MATLAB_class"] = cls


@pytest.mark.parametrize("where", ["absolute", "relative"])
def test_v73_external_storage_refused(tmp_path, where):
    secret = tmp_path / "secret.bin"
    secret.write_bytes(np.full(18, 7.0, np.float32).tobytes())
    target = os.fspath(secret) if where == "absolute" else "../secret.bin"
    (tmp_path / "sub").mkdir()

    def edit(h5py, f, _):
        _replace(f, _filters_name(f), lambda n: f.create_dataset(
            n, shape=(2, 1, 3, 3), dtype=np.float32, external=[(target, 0, 72)]))

    path = _v73(tmp_path / "sub", edit)
    # before: the filters were read from secret.bin (absolute) or the read failed
    # with a raw OSError naming the missing file (relative, resolved elsewhere)
    refused(path, "external storage.*opens no file but the one it was given")


def test_v73_virtual_dataset_and_external_link_refused(tmp_path):
    h5py = pytest.importorskip("h5py")
    other = tmp_path / "other.mat"
    save_v73(other, layers=layers_of())  # a valid network elsewhere
    with h5py.File(other, "r") as f:
        source_name = _filters_name(f)

    def virtual(h5py, f, _):
        def make(n):
            layout = h5py.VirtualLayout(shape=(2, 1, 3, 3), dtype=np.float32)
            layout[...] = h5py.VirtualSource(os.fspath(other), source_name, shape=(2, 1, 3, 3))
            return f.create_virtual_dataset(n, layout)
        _replace(f, _filters_name(f), make)

    refused(_v73(tmp_path, virtual, "v.mat"), "virtual dataset")  # before: read other.mat

    def link(h5py, f, _):
        del f["layers"]
        f["layers"] = h5py.ExternalLink(os.fspath(other), "/layers")

    refused(_v73(tmp_path, link, "l.mat"), "external link to .*other.mat")  # before: loaded


@pytest.mark.parametrize("case", ["soft cycle", "hard cycle", "reference cycle"])
def test_v73_cycles_named(tmp_path, case):
    def edit(h5py, f, _):
        if case == "soft cycle":  # before: a raw KeyError resolving the link
            del f["layers"]
            f["layers"] = h5py.SoftLink("/layers")
        elif case == "hard cycle":  # a struct holding itself; before: RecursionError
            layer = f[f["layers"][1, 0]]
            layer["self"] = layer
        else:  # a cell whose element is the cell; before: RecursionError
            ds = f["#refs#"].create_dataset("loop", shape=(1, 1), dtype=h5py.ref_dtype)
            ds[0, 0] = ds.ref
            ds.attrs["MATLAB_class"] = np.bytes_("cell")
            f["meta"] = ds

    match = {"soft cycle": "soft link", "hard cycle": "contains itself",
             "reference cycle": "contains itself"}[case]
    refused(_v73(tmp_path, edit), match)


def test_v73_declared_sizes_checked_before_reading(tmp_path):
    def unwritten(h5py, f, _):  # 4 GiB declared, nothing written: a 6 KiB file
        _replace(f, _filters_name(f), lambda n: f.create_dataset(
            n, shape=(1 << 15, 1 << 14), dtype=np.float64))

    path = _v73(tmp_path, unwritten, "u.mat")
    assert path.stat().st_size < 64 << 10
    refused(path, r"declares \(16384, 32768\) elements of float64 \(4294967296 bytes\), more "
                  r"than max_bytes=1073741824.*load_simplenn\(\.\.\., max_bytes=")

    def empty(h5py, f, _):  # MATLAB_empty of 2^20 x 2^20: 8 TiB of zeros before
        name = f[f[f["layers"][0, 0]]["weights"][1, 0]].name
        del f[name]
        ds = f.create_dataset(name, data=np.array([1 << 20, 1 << 20], np.uint64))
        ds.attrs["MATLAB_class"] = np.bytes_("single")
        ds.attrs["MATLAB_empty"] = np.uint8(1)

    refused(_v73(tmp_path, empty, "e.mat"), "marked empty .* declares dimensions "
                                            "1048576x1048576")
    path = _v73(tmp_path, lambda *a: None, "ok.mat", meta=np.zeros((300, 300)))
    refused(path, "max_bytes=100000", max_bytes=100_000)
    assert len(load_simplenn(path).layers) == 4


def test_v73_truncated_deep_and_bad_chars_named(tmp_path):
    path = _v73(tmp_path, lambda *a: None)
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    refused(path, "not a readable HDF5")  # before: a raw OSError from h5py

    v = np.ones((1, 1))
    for _ in range(400):
        v = cell(v)
    refused(_v73(tmp_path, lambda *a: None, "deep.mat", meta=v), "max_depth=100")

    for code, match in ((0xD800, "not valid UTF-16"), (0x110000, "not UTF-16 code units")):
        def bad_name(h5py, f, _, code=code):
            layer = f[f["layers"][1, 0]]
            del layer["name"]
            ds = layer.create_dataset("name", data=np.array([[code]], np.uint32))
            ds.attrs["MATLAB_class"] = np.bytes_("char")

        # before: a lone surrogate was loaded as the layer's name; 0x110000 a raw ValueError
        refused(_v73(tmp_path, bad_name, f"c{code}.mat"), match)


def test_v73_surrogate_pairs_joined(tmp_path):
    def edit(h5py, f, _):
        layer = f[f["layers"][1, 0]]
        del layer["name"]
        ds = layer.create_dataset("name", data=np.array([[0xD83D], [0xDE00]], np.uint16))
        ds.attrs["MATLAB_class"] = np.bytes_("char")

    assert load_simplenn(_v73(tmp_path, edit)).layers[1].name == "\U0001F600"


# ------------------------------------------------------------ layer fields

BAD_FIELDS = [  # (layer, field, value, what the error says)
    ({"type": "conv"}, "pad", np.array([[np.inf]]), "'pad' must be finite"),
    ({"type": "conv"}, "pad", "abc", "'pad' must be real numbers, got 'abc'"),
    ({"type": "conv"}, "stride", {"a": np.ones((1, 1))}, "'stride' must be real numbers, got "
                                                         "a struct"),
    ({"type": "conv"}, "stride", np.array([[1e18]]), "stride is 1000000000000000000, more than "
                                                     "max_extent=1024"),
    ({"type": "conv"}, "stride", np.array([[0.0]]), "'stride' must be 1 or 2 >= 1 integers"),
    ({"type": "conv"}, "dilate", np.array([[1.5]]), "'dilate' must be 1 or 2 >= 1 integers"),
    ({"type": "conv"}, "precious", "yes", "'precious' must be real numbers"),
    ({"type": "conv"}, "name", np.array([[3.0]]), "'type' and 'name' must be strings"),
    ({"type": "conv"}, "weights", cell(np.ones((3, 3, 1, 2)), np.ones((1, 3))),
     "3 biases for 2 outputs"),
    ({"type": "convt"}, "numGroups", np.array([[np.inf]]), "'numGroups' must be finite"),
    ({"type": "convt"}, "numGroups", np.array([[3.0]]), "must divide the filters' D = 2"),
    ({"type": "convt"}, "upsample", np.array([[1e6]]), "upsample is 1000000, more than "
                                                       "max_extent"),
    ({"type": "lrn", "param": np.array([[1e9, 1, 1e-4, 0.75]])}, None, None,
     r"param\(1\) \(the window N\) is 1000000000"),
    ({"type": "lrn"}, "param", np.array([[5.0, 0.0, 1e-4, 0.75]]), "KAPPA > 0"),
    ({"type": "pool", "pool": np.array([[2.0]])}, "pad", np.array([[2.0]]),
     "must be smaller than the window"),
    ({"type": "pool", "pool": np.array([[2.0]])}, "method", cell("max"), "method must be"),
    ({"type": "relu"}, "leak", np.array([[np.nan]]), "'leak' must be finite"),
    ({"type": "dropout"}, "rate", "half", "'rate' must be real numbers"),
    ({"type": "softmaxloss"}, "class", "abc", "'class' must be real numbers"),
    ({"type": "pdist"}, "p", np.array([[-1.0]]), "need p > 0"),
    ({"type": "spnorm"}, "param", np.array([[2.0, 1e9, 1, 1]]), "window PH PW"),
    ({"type": "noffset"}, "param", np.array([[1.0]]), r"param must be \[P1 P2\]"),
]


@pytest.mark.parametrize("fmt", ["v5", "v73"])
@pytest.mark.parametrize("layer, field, value, match", BAD_FIELDS,
                         ids=[f"{d['type']}-{f}" for d, f, _, _ in BAD_FIELDS])
def test_layer_fields_checked_at_load(tmp_path, fmt, layer, field, value, match):
    if fmt == "v73":
        pytest.importorskip("h5py")
    d = dict(layer)
    if d["type"] in ("conv", "convt"):
        filters = np.ones((3, 3, 2, 2) if d["type"] == "convt" else (3, 3, 1, 2))
        d["weights"] = cell(filters, np.zeros((1, 2)))
    if field is not None:
        d[field] = value
    d.setdefault("name", "bad")
    path = tmp_path / "net.mat"
    (save_v5 if fmt == "v5" else save_v73)(path, layers=cell(d))
    message = refused(path, match)
    assert "net.layers{1}" in message


def test_limits_are_keyword_arguments_with_module_defaults(tmp_path):
    import inspect

    from tapegrad.compat import _matcheck

    sig = inspect.signature(load_simplenn).parameters
    assert {k: sig[k].default for k in ("max_bytes", "max_items", "max_depth", "max_extent")} \
        == {"max_bytes": _matcheck.MAX_BYTES, "max_items": _matcheck.MAX_ITEMS,
            "max_depth": _matcheck.MAX_DEPTH, "max_extent": _matcheck.MAX_EXTENT}
    path = tmp_path / "net.mat"
    save_v5(path, layers=cell({"type": "convt", "name": "up", "upsample": np.array([[2000.0]]),
                              "weights": cell(np.ones((2, 2, 1, 1)))}))
    refused(path, "max_extent=1024")
    assert load_simplenn(path, max_extent=4096).layers[0].upsample == (2000, 2000)
    with pytest.raises(errors.ArgumentError, match="max_bytes must be a non-negative int"):
        load_simplenn(path, max_bytes=-1)


# ------------------------------------------------- fuzzing, memory capped
# Mutated files are loaded in a child process whose address space is capped
# (RLIMIT_AS 3 GiB), one answer per file within a timeout: a bomb or a hang
# fails the test instead of the machine.

_WORKER = r"""
import resource, sys, traceback
from tapegrad.errors import TapegradError
from tapegrad.compat.matconvnet import load_simplenn
resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
for line in sys.stdin:
    try:
        load_simplenn(line.strip())
        answer = "ok"
    except TapegradError as e:
        answer = "named " + type(e).__name__
    except BaseException as e:
        answer = "RAW " + repr(traceback.format_exc()[-1500:])
    print(answer, flush=True)
"""
_TIMEOUT = 60


@pytest.fixture(scope="module")
def worker():
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    import tapegrad

    root = os.path.dirname(os.path.dirname(os.path.abspath(tapegrad.__file__)))  # the same one
    env["PYTHONPATH"] = os.pathsep.join([root, env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    state = {"proc": proc}

    def ask(path):
        p = state["proc"]
        p.stdin.write(os.fspath(path) + "\n")
        p.stdin.flush()
        ready, _, _ = select.select([p.stdout], [], [], _TIMEOUT)
        line = p.stdout.readline() if ready else ""
        if not line:  # timed out or died (killed for memory, a crash): fail, and restart
            p.kill()
            err = p.stderr.read()[-2000:]
            state["proc"] = subprocess.Popen(p.args, stdin=subprocess.PIPE,
                                             stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                             text=True, env=env)
            pytest.fail(f"loading {path} {'timed out' if not ready else 'killed the child'} "
                        f"(rc {p.poll()}): {err}")
        return line.strip()

    yield ask
    state["proc"].stdin.close()
    state["proc"].wait(timeout=_TIMEOUT)


@pytest.fixture(scope="module")
def seeds(tmp_path_factory):
    """Valid small files: v5 plain, v5 compressed, v7.3."""
    import scipy.io

    d = tmp_path_factory.mktemp("seeds")
    out = {}
    net = dict(layers=layers_of(), meta={"classes": {"name": cell("a", "b")}})
    save_v5(d / "v5.mat", **net)
    scipy.io.savemat(d / "v5z.mat", net, oned_as="row", do_compression=True)
    out["v5"], out["v5z"] = (d / "v5.mat").read_bytes(), (d / "v5z.mat").read_bytes()
    try:
        save_v73(d / "v73.mat", **net)
        out["v73"] = (d / "v73.mat").read_bytes()
    except ImportError:
        pass
    return out


_EDITS = st.lists(st.tuples(st.sampled_from(["set", "flip", "cut", "insert", "delete"]),
                            st.floats(0, 1), st.binary(min_size=1, max_size=8)),
                  min_size=1, max_size=4)


@given(kind=st.sampled_from(["v5", "v5z", "v73"]), edits=_EDITS)
def test_fuzz_bytes_load_or_named_error(tmp_path_factory, worker, seeds, kind, edits):
    if kind not in seeds:
        reject()
    data = bytearray(seeds[kind])
    for op, where, chunk in edits:
        i = int(where * (len(data) - 1))
        if op == "set":
            data[i:i + len(chunk)] = chunk
        elif op == "flip":
            data[i] ^= chunk[0] | 1
        elif op == "cut":
            del data[i:]
        elif op == "insert":
            data[i:i] = chunk
        else:
            del data[i:i + chunk[0]]
        if not data:
            break
    path = tmp_path_factory.mktemp("fuzz") / "x.mat"
    path.write_bytes(bytes(data))
    answer = worker(path)
    assert answer == "ok" or answer.startswith("named "), answer


_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(lambda x: np.array([[x]])),
    st.integers(-(2 ** 62), 2 ** 62).map(lambda x: np.array([[float(x)]])),
    st.lists(st.floats(-1e3, 1e3), min_size=0, max_size=6).map(lambda v: np.array([v])),
    st.text(st.characters(max_codepoint=0xFFFF, exclude_categories=("Cs",)), max_size=4),
    st.sampled_from([np.zeros((0, 3)), np.ones((2, 3, 4)), np.array([[True]]),
                     np.array([[7]], np.int32), np.array([[1e300]])]),
    st.builds(lambda: {"a": np.ones((1, 1))}),
    st.builds(lambda: cell(np.ones((1, 1)), "x")),
)
_FIELDS = ["type", "name", "weights", "pad", "stride", "dilate", "pool", "method", "leak",
           "precious", "class", "upsample", "numGroups", "param", "rate", "epsilon"]
_TYPES = ["conv", "convt", "pool", "relu", "lrn", "bnorm", "dropout", "spnorm", "noffset",
          "softmaxloss", "loss", "pdist", "sigmoid", "softmax"]


@given(fmt=st.sampled_from(["v5", "v73"]), index=st.integers(0, 3),
       kind=st.sampled_from(_TYPES), field=st.sampled_from(_FIELDS), value=_VALUES,
       depth=st.integers(0, 3))
def test_fuzz_structure_load_or_named_error(tmp_path_factory, worker, seeds, fmt, index,
                                            kind, field, value, depth):
    if fmt == "v73" and "v73" not in seeds:
        reject()
    layers = layers_of()
    d = dict(layers[0, index])
    if depth == 0:
        d["type"] = kind  # another layer type with these fields
    for _ in range(depth - 1):
        value = cell(value)  # nested where a number belongs
    d[field] = value
    layers[0, index] = d
    path = tmp_path_factory.mktemp("fuzz") / "x.mat"
    try:
        (save_v5 if fmt == "v5" else save_v73)(path, layers=layers)
    except (TypeError, ValueError, KeyError, OverflowError):
        reject()  # a value the test's writers cannot store
    answer = worker(path)
    assert answer == "ok" or answer.startswith("named "), answer
