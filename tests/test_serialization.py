"""tapegrad.save / tapegrad.load: round trips, no pickle, clear errors."""

import io
import json
import math
import os
import stat
import struct
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import tapegrad as tg
from tapegrad import nn, optim
from tapegrad.errors import TapegradError
from tapegrad.serialization import SerializationError


def _net():
    return nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.ReLU(), nn.Flatten(),
                         nn.Linear(8, 3))


def test_state_dict_round_trip(tmp_path):
    tg.manual_seed(0)
    net = _net()
    net(tg.randn(4, 1, 4, 4))  # moves the running statistics
    path = tmp_path / "model.npz"
    tg.save(net.state_dict(), path)
    sd = tg.load(path)
    assert list(sd) == list(net.state_dict())
    for k, v in net.state_dict().items():
        assert isinstance(sd[k], tg.Tensor) and sd[k].dtype == v.dtype, k
        np.testing.assert_array_equal(sd[k].numpy(), v.numpy(), err_msg=k)
    assert sd["1.num_batches_tracked"].dtype == np.int64
    tg.manual_seed(1)
    other = _net()
    other.load_state_dict(sd)
    x = tg.randn(2, 1, 4, 4)
    np.testing.assert_array_equal(other.eval()(x).numpy(), net.eval()(x).numpy())
    # readable by plain NumPy, with the parameter names, and without pickle
    with np.load(path, allow_pickle=False) as raw:
        assert "4.weight" in raw.files and "__tapegrad__" in raw.files
        np.testing.assert_array_equal(raw["4.weight"], net[4].weight.numpy())


def test_nested_metadata_round_trip(tmp_path):
    obj = {
        "epoch": 7, "best": 0.25, "name": "lenet", "flag": True, "none": None,
        "nan": float("nan"), "inf": -math.inf,
        "arr": np.arange(6, dtype=np.int32).reshape(2, 3),
        "tensor": tg.tensor([1.0, 2.0], requires_grad=True),
        "nested": {"a": {"b": [1, 2.5, "x", (3, 4)]}, 3: "int key"},
        "list_of_tensors": [tg.zeros(2), tg.ones(1, dtype=np.float64)],
        "weird/key.__name": tg.zeros(1),
        "__tapegrad__": 1,  # a user key that looks like ours
    }
    path = tmp_path / "meta.npz"
    tg.save(obj, str(path))
    back = tg.load(str(path))
    assert back["epoch"] == 7 and back["best"] == 0.25 and back["name"] == "lenet"
    assert back["flag"] is True and back["none"] is None and back["__tapegrad__"] == 1
    assert math.isnan(back["nan"]) and back["inf"] == -math.inf
    assert isinstance(back["arr"], np.ndarray) and back["arr"].dtype == np.int32
    np.testing.assert_array_equal(back["arr"], obj["arr"])
    assert isinstance(back["tensor"], tg.Tensor) and back["tensor"].requires_grad
    assert back["nested"] == {"a": {"b": [1, 2.5, "x", (3, 4)]}, 3: "int key"}
    assert back["list_of_tensors"][1].dtype == np.float64
    assert back["weird/key.__name"].shape == (1,)


def test_keys_that_zip_names_cannot_hold(tmp_path):
    # a NUL used to truncate the entry name (saved fine, then unreadable); a lone
    # surrogate made save fail with UnicodeEncodeError
    obj = {"\x00": np.ones(1), "\x00b": tg.zeros(2), "a\\b": np.arange(2), "\ud800x": np.ones(3)}
    path = tmp_path / "keys.npz"
    tg.save(obj, path)
    back = tg.load(path)
    assert list(back) == list(obj)
    for k, v in obj.items():
        assert type(back[k]) is type(v), repr(k)
        np.testing.assert_array_equal(np.asarray(back[k]), np.asarray(v), err_msg=repr(k))


def test_file_objects_and_atomic_write(tmp_path):
    buf = io.BytesIO()
    tg.save({"w": tg.ones(3)}, buf)
    buf.seek(0)
    np.testing.assert_array_equal(tg.load(buf)["w"].numpy(), np.ones(3))
    path = tmp_path / "ckpt"  # no .npz suffix is added
    tg.save({"x": 1}, path)
    assert path.exists() and [p.name for p in tmp_path.iterdir()] == ["ckpt"]


def test_unsavable_objects_raise():
    with pytest.raises(SerializationError, match="cannot store a object at key model"):
        tg.save({"model": object()}, io.BytesIO())  # whole modules: test_serialization_modules
    with pytest.raises(SerializationError, match="object"):
        tg.save({"a": np.array([object()])}, io.BytesIO())
    with pytest.raises(SerializationError, match="key"):
        tg.save({(1, 2): 3}, io.BytesIO())


def test_truncated_file(tmp_path):
    path = tmp_path / "full.npz"
    tg.save({"w": tg.randn(64, 64), "b": tg.zeros(64)}, path)
    data = path.read_bytes()
    for cut in (len(data) // 2, len(data) - 30, 10):
        bad = tmp_path / f"cut{cut}.npz"
        bad.write_bytes(data[:cut])
        with pytest.raises(SerializationError, match="not a readable tapegrad checkpoint"):
            tg.load(bad)


def test_foreign_files(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello, I am not a checkpoint\n" * 10)
    plain = tmp_path / "plain.npz"
    np.savez(plain, a=np.zeros(3))
    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, __tapegrad__=np.array(["x"]), evil=np.array([{"a": 1}], dtype=object))
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(2))
    junk_meta = tmp_path / "junk.npz"
    np.savez(junk_meta, __tapegrad__=np.array("{not json"))
    png = tmp_path / "image.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(64))
    for path in (text, plain, pickled, single, junk_meta, png):
        with pytest.raises(SerializationError) as e:
            tg.load(path)
        assert isinstance(e.value, TapegradError) and isinstance(e.value, ValueError)
        assert path.name in str(e.value) and "allow_pickle" not in str(e.value)
    for path in (text, png):  # numpy calls these "pickled (object) data"
        with pytest.raises(SerializationError, match="not an .npz archive") as e:
            tg.load(path)
        assert "pickle" not in str(e.value)
    # a pickled object array referenced by valid metadata is refused too, not unpickled
    sneaky = tmp_path / "sneaky.npz"
    meta = '{"format": "tapegrad-npz", "version": 1, "tree": {"$array": "evil"}}'
    np.savez(sneaky, __tapegrad__=np.array(meta), evil=np.array([{"a": 1}], dtype=object))
    with pytest.raises(SerializationError, match="pickle"):
        tg.load(sneaky)
    with pytest.raises(FileNotFoundError):
        tg.load(tmp_path / "missing.npz")
    assert zipfile.is_zipfile(plain)


def test_optimizer_state_round_trip(tmp_path):
    tg.manual_seed(0)
    net = nn.Linear(3, 2)
    opt = optim.Adam(net.parameters(), lr=0.01, betas=(0.8, 0.95))
    net(tg.randn(4, 3)).sum().backward()
    opt.step()
    tg.save(opt.state_dict(), tmp_path / "opt.npz")
    back = tg.load(tmp_path / "opt.npz")
    assert back["param_groups"][0]["betas"] == (0.8, 0.95)
    assert back["param_groups"][0]["params"] == [0, 1]
    assert set(back["state"]) == {0, 1} and back["state"][0]["step"] == 1
    np.testing.assert_array_equal(back["state"][1]["exp_avg"], opt.state[net.bias]["exp_avg"])


@pytest.mark.gpu
def test_device_round_trip(tmp_path):
    t = tg.randn(3, device="cuda")
    tg.save({"t": t, "raw": t.array}, tmp_path / "g.npz")
    back = tg.load(tmp_path / "g.npz")
    assert back["t"].device.type == "cpu" and isinstance(back["raw"], np.ndarray)
    on_gpu = tg.load(tmp_path / "g.npz", device="cuda")
    assert on_gpu["t"].device.type == "cuda"
    np.testing.assert_array_equal(on_gpu["t"].cpu().numpy(), t.cpu().numpy())
    mapped = tg.load(tmp_path / "g.npz", map_location="cuda:0")
    assert mapped["t"].device == on_gpu["t"].device


# ------------------------------------------------------------------ hostile files
def _meta(tree, version=1, **extra):
    return json.dumps({"format": "tapegrad-npz", "version": version, "tree": tree, **extra})


def _npz(path, meta, compress=False, **arrays):
    (np.savez_compressed if compress else np.savez)(path, __tapegrad__=np.array(meta), **arrays)
    return path


def _refused(path, match, **limits):
    with pytest.raises(SerializationError, match=match) as e:
        tg.load(path, **limits)
    assert str(path) in str(e.value) or path.name in str(e.value)
    return str(e.value)


def test_deeply_nested_metadata(tmp_path):
    # 5,000 levels used to escape as RecursionError from the JSON parser
    deep = _npz(tmp_path / "deep.npz", _meta("X").replace('"X"', "[" * 5000 + "]" * 5000))
    _refused(deep, "nested too deeply")
    nested = 0
    for _ in range(150):
        nested = [nested]
    mid = _npz(tmp_path / "mid.npz", _meta(nested))
    _refused(mid, r"max_depth=100\b")
    assert tg.load(mid, max_depth=200) == nested
    with pytest.raises(SerializationError, match="MAX_DEPTH"):
        tg.save(nested, io.BytesIO())  # save refuses what load would refuse...
    for _ in range(1500):
        nested = [nested]
    with pytest.raises(SerializationError, match="MAX_DEPTH"):
        tg.save(nested, io.BytesIO())  # ...and no RecursionError at any depth
    ok = 0
    for _ in range(100):
        ok = [ok]
    buf = io.BytesIO()
    tg.save(ok, buf)
    buf.seek(0)
    assert tg.load(buf) == ok


def _npy_bytes(shape, descr="<f8", data=b""):
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() + data


def _meta_npy(meta):
    return _npy_bytes((), f"<U{len(meta)}", meta.encode("utf-32-le"))


def test_huge_shape_in_npy_header(tmp_path):
    # a 745 GiB claim used to reach np.empty and escape as MemoryError
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__tapegrad__.npy", _meta_npy(_meta({"$array": "w"})))
        z.writestr("w.npy", _npy_bytes((100_000_000_000,), data=bytes(64)))
    msg = _refused(path, r"declares shape \(100000000000,\) float64")
    assert "holds 64 bytes" in msg
    for shape, match in [((-8, -1), "malformed"), ((2,), "holds 64 bytes")]:
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("__tapegrad__.npy", _meta_npy(_meta({"$array": "w"})))
            z.writestr("w.npy", _npy_bytes(shape, data=bytes(64)))
        _refused(path, match)


def test_inflated_size_limit(tmp_path):
    # 8 MiB of zeros deflate to a few KiB; the limit is checked before inflating
    bomb = _npz(tmp_path / "bomb.npz", _meta({"$array": "w"}), compress=True,
                w=np.zeros(1 << 20))
    assert bomb.stat().st_size < 100_000
    _refused(bomb, r"inflate to \d+ bytes, more than max_bytes=1048576", max_bytes=1 << 20)
    np.testing.assert_array_equal(tg.load(bomb), np.zeros(1 << 20))
    # a directory that declares 2 GiB for a tiny entry is refused at the default limit
    data = bytearray(bomb.read_bytes())
    cd = data.rindex(b"PK\x01\x02")  # the last central-directory record: w.npy
    struct.pack_into("<I", data, cd + 24, 2 << 30)  # its uncompressed size
    bomb.write_bytes(bytes(data))
    _refused(bomb, rf"inflate to 21474\d{{5}} bytes, more than max_bytes={1 << 30}")
    # overlapping stored entries cannot make one region count twice
    plain = _npz(tmp_path / "plain.npz", _meta({"$array": "w"}), w=np.zeros(4096))
    data = bytearray(plain.read_bytes())
    cds = [i for i in range(len(data)) if data[i:i + 4] == b"PK\x01\x02"]
    offset, = struct.unpack_from("<I", data, cds[1] + 42)
    struct.pack_into("<I", data, cds[0] + 42, offset)  # meta's record points at w's data
    plain.write_bytes(bytes(data))
    with pytest.raises(SerializationError, match="plain.npz"):
        tg.load(plain)


def test_entry_count_limit(tmp_path):
    arrays = {f"a{i}": np.zeros(1) for i in range(20)}
    path = _npz(tmp_path / "many.npz", _meta({"$dict": [[k, {"$array": k}] for k in arrays]}),
                **arrays)
    _refused(path, "21 entries, more than max_entries=10", max_entries=10)
    assert len(tg.load(path, max_entries=21)) == 20
    # the count is read from the end-of-directory record before zipfile parses the directory
    data = bytearray(path.read_bytes())
    struct.pack_into("<H", data, data.rindex(b"PK\x05\x06") + 10, 0xFFFE)
    path.write_bytes(bytes(data))
    _refused(path, "65534 entries, more than max_entries=1000", max_entries=1000)


BAD_TREES = [
    ({"$tensor": 5, "requires_grad": False}, "invalid or repeated array reference"),
    ({"$tensor": "w"}, "unknown entry"),  # the encoder always writes requires_grad
    ({"$tensor": "w", "requires_grad": "yes"}, "unknown entry"),
    ({"$array": "w", "x": 1}, "unknown entry"),
    ({"$array": "nope"}, "does not hold"),
    ({"$array": "__tapegrad__"}, "does not hold"),
    ([{"$array": "w"}, {"$array": "w"}], "repeated array reference"),
    ({"$dict": 3}, "unknown entry"),
    ({"$dict": [[1]]}, "malformed dict item"),
    ({"$dict": [[[1], 2]]}, "malformed dict item"),
    ({"$dict": [["a", {"$what": 1}]]}, "unknown entry at key a"),
    ({"$tuple": {"a": 1}}, "unknown entry"),
    ({"$float": "abc"}, "unknown entry"),
    ({"$float": "1.5"}, "unknown entry"),
    ({"plain": "dict"}, "unknown entry"),
]


@pytest.mark.parametrize("tree,match", BAD_TREES)
def test_metadata_schema(tmp_path, tree, match):
    path = _npz(tmp_path / "bad.npz", _meta(tree), w=np.zeros(2, np.float32),
                s=np.array(["text"]))
    _refused(path, match)


@pytest.mark.parametrize("meta,match", [
    (_meta(1, version="2"), "invalid format version"),
    (_meta(1, version=True), "invalid format version"),
    (_meta(1, version=0), "invalid format version"),
    (_meta(1, version=3), "newer than this tapegrad reads"),
    (_meta(1, extra=1), "not in the 'tapegrad-npz' format"),
    (json.dumps({"format": "tapegrad-npz", "version": 1}), "not in the 'tapegrad-npz' format"),
    (json.dumps([1, 2]), "not in the 'tapegrad-npz' format"),
    ('{"format": "tapegrad-npz", "version": 1, "tree": 1', "not valid JSON"),
    (_meta({"$tensor": "s", "requires_grad": False}), "stored as a Tensor but has dtype <U4"),
])
def test_metadata_header(tmp_path, meta, match):
    path = _npz(tmp_path / "bad.npz", meta, s=np.array(["text"]))
    _refused(path, match)


def test_metadata_entry_type_and_encoding(tmp_path):
    _refused(_npz(tmp_path / "bytes.npz", b"\xff\xfe"), "dtype |S2, not a JSON string")
    _refused(_npz(tmp_path / "vec.npz", np.array(["a", "b"])), r"shape \(2,\)")


def test_corrupt_data_and_compression_methods(tmp_path):
    path = tmp_path / "ok.npz"
    tg.save({"w": tg.randn(64)}, path)
    data = bytearray(path.read_bytes())
    data[data.index(b"w.npy") + 200] ^= 0x10  # inside w's float data
    path.write_bytes(bytes(data))
    _refused(path, "Bad CRC-32 for file 'w.npy'")
    lz = tmp_path / "lzma.npz"
    with zipfile.ZipFile(lz, "w", compression=zipfile.ZIP_LZMA) as z:
        z.writestr("__tapegrad__.npy", _meta_npy(_meta(1)))
    _refused(lz, "compression method 14")  # bzip2/lzma inflate without a bound in zipfile


def test_own_reader_matches_numpy(tmp_path):
    """The checked reader returns what np.load returns, for every layout save writes."""
    arrays = {
        "f": np.asfortranarray(np.arange(12.0).reshape(3, 4)),
        "empty": np.zeros((0, 3), np.float32),
        "scalar": np.array(2.5),
        "bools": np.array([True, False]),
        "text": np.array(["a", "bcd"]),
        "rec": np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")]),
        "big_endian": np.arange(3, dtype=">i8"),
        "c": np.array([1 + 2j], np.complex64),
    }
    path = tmp_path / "layouts.npz"
    tg.save(arrays, path)
    back = tg.load(path)
    with np.load(path) as raw:
        for k, v in arrays.items():
            assert back[k].dtype == v.dtype and back[k].shape == v.shape, k
            np.testing.assert_array_equal(back[k], raw[k], err_msg=k)
            assert back[k].flags.writeable, k
    assert back["f"].flags.f_contiguous


# ------------------------------------------------------------------ save durability
@pytest.mark.skipif(os.name != "posix", reason="pid liveness probe is POSIX-only")
def test_save_removes_stale_temporaries_only(tmp_path):
    path = tmp_path / "model.npz"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stale = tmp_path / f"model.npz.tmp{dead_pid}"
        running = tmp_path / f"model.npz.tmp{live.pid}"
        others = [tmp_path / f"other.npz.tmp{dead_pid}", tmp_path / "model.npz.tmpx",
                  tmp_path / f"model.npz.tmp{dead_pid}.bak"]
        for p in (stale, running, *others):
            p.write_bytes(b"partial")
        tg.save({"w": tg.ones(2)}, path)
        assert not stale.exists()
        assert running.exists() and all(p.exists() for p in others)
        np.testing.assert_array_equal(tg.load(path)["w"].numpy(), np.ones(2))
    finally:
        live.kill()
        live.wait()


def test_save_syncs_before_rename(tmp_path, monkeypatch):
    calls = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(("fsync", os.fstat(fd))),
                                                 real_fsync(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (calls.append(("replace", a)),
                                                     real_replace(a, b)))
    path = tmp_path / "ckpt.npz"
    tg.save({"w": tg.ones(2)}, path)
    kinds = [c[0] for c in calls]
    assert kinds[:2] == ["fsync", "replace"]
    assert stat.S_ISREG(calls[0][1].st_mode) and calls[0][1].st_size == path.stat().st_size
    if os.name == "posix":  # then the folder, so the rename itself survives a crash
        assert kinds == ["fsync", "replace", "fsync"] and stat.S_ISDIR(calls[2][1].st_mode)
