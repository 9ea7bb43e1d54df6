"""tapegrad.load on damaged and hostile files: nothing but SerializationError comes
out, and whatever loads is exactly what was saved (hypothesis; small files)."""

import io
import json
import math
import struct

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import tapegrad as tg
from tapegrad.serialization import MAX_DEPTH, SerializationError


def _saved(obj):
    buf = io.BytesIO()
    tg.save(obj, buf)
    return buf.getvalue()


OBJ = {"w": tg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3), requires_grad=True),
       "b": np.arange(3), "meta": {"epoch": 2, "t": (1.5, None, "x")}, 7: [True, "y"]}
DATA = _saved(OBJ)


def _load(data, **limits):
    """The loaded object, or None where load refused with SerializationError (any
    other exception fails the test)."""
    try:
        return tg.load(io.BytesIO(data), **limits)
    except SerializationError:
        return None


def _assert_same(back, obj=OBJ):
    assert type(back) is type(obj)
    if isinstance(obj, tg.Tensor):
        assert back.dtype == obj.dtype and back.requires_grad == obj.requires_grad
        np.testing.assert_array_equal(back.numpy(), obj.numpy())
    elif isinstance(obj, np.ndarray):
        assert back.dtype == obj.dtype
        np.testing.assert_array_equal(back, obj)
    elif isinstance(obj, dict):
        assert list(back) == list(obj)
        for k in obj:
            _assert_same(back[k], obj[k])
    elif isinstance(obj, (list, tuple)):
        assert len(back) == len(obj)
        for a, b in zip(back, obj):
            _assert_same(a, b)
    elif isinstance(obj, float) and math.isnan(obj):
        assert math.isnan(back)
    else:
        assert back == obj


def _npz(meta, **entries):
    """An archive holding ``meta`` as the metadata and raw ``name.npy`` entries."""
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        with z.open("__tapegrad__.npy", "w") as fh:
            np.save(fh, np.array(meta))
        for name, raw in entries.items():
            z.writestr(name + ".npy", raw)
    return buf.getvalue()


def _npy(arr):
    buf = io.BytesIO()
    np.save(buf, arr)
    return buf.getvalue()


# ------------------------------------------------------------------ valid files
arrays = st.builds(lambda shape, dt, seed: np.random.default_rng(seed).standard_normal(shape)
                   .astype(dt),
                   st.lists(st.integers(0, 3), max_size=3).map(tuple),
                   st.sampled_from([np.float32, np.float64, np.int32, np.bool_]),
                   st.integers(0, 2 ** 16))
scalars = (st.none() | st.booleans() | st.integers(-2 ** 70, 2 ** 70) | st.floats()
           | st.text(max_size=8))
values = st.recursive(
    scalars | arrays | arrays.filter(lambda a: a.dtype.kind == "f").map(tg.tensor),
    lambda c: (st.lists(c, max_size=3) | st.lists(c, max_size=3).map(tuple)
               | st.dictionaries(st.text(max_size=5) | st.integers(), c, max_size=3)),
    max_leaves=12)


@given(values)
def test_valid_objects_round_trip(obj):
    _assert_same(tg.load(io.BytesIO(_saved(obj))), obj)


# ------------------------------------------------------------------ damaged files
@given(st.integers(0, len(DATA) - 1))
def test_truncated_files_are_refused(cut):
    assert _load(DATA[:cut]) is None


@given(st.lists(st.tuples(st.integers(0, len(DATA) - 1), st.integers(0, 7)), min_size=1,
                max_size=4))
def test_bit_flips_are_refused_or_harmless(flips):
    data = bytearray(DATA)
    for pos, bit in flips:
        data[pos] ^= 1 << bit
    back = _load(bytes(data))
    if back is not None:  # a flip in a field nothing reads (a timestamp, an attribute)
        _assert_same(back)


def _directory_records(data):
    i, out = 0, []
    while (i := data.find(b"PK\x01\x02", i)) >= 0:
        out.append(i)
        i += 4
    return out


@given(st.data(), st.integers(0, 2 ** 32 - 1), st.integers(0, 2 ** 32 - 1))
def test_declared_zip_sizes(data, compressed, uncompressed):
    raw = bytearray(DATA)
    rec = data.draw(st.sampled_from(_directory_records(DATA)))
    struct.pack_into("<II", raw, rec + 20, compressed, uncompressed)
    back = _load(bytes(raw))
    if back is not None:
        _assert_same(back)


# ------------------------------------------------------------------ crafted metadata
KEYS = st.sampled_from(["$tensor", "$array", "$dict", "$tuple", "$float", "requires_grad",
                        "params"])
NAMES = st.sampled_from(["w", "s", "missing", "__tapegrad__", "nan", "-inf", "1.5"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | NAMES,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(KEYS, c, max_size=3),
    max_leaves=15)
ENTRIES = {"w": _npy(np.arange(4, dtype=np.float32)), "s": _npy(np.array(["ab"]))}


@given(json_values, st.sampled_from([1, 1, 1, 0, 2, "1", True, None]),
       st.dictionaries(st.sampled_from(["format", "extra"]), st.just("tapegrad-npz"),
                       max_size=1))
def test_crafted_metadata(tree, version, extra):
    meta = json.dumps({"format": "tapegrad-npz", "version": version, "tree": tree, **extra})
    back = _load(_npz(meta, **ENTRIES))
    if back is not None:  # what load accepts, save writes back identically
        _assert_same(tg.load(io.BytesIO(_saved(back))), back)


@given(st.integers(1, 3000))
def test_nesting_depth(depth):
    tree = "0"
    for _ in range(depth):
        tree = f"[{tree}]"
    meta = '{"format": "tapegrad-npz", "version": 1, "tree": ' + tree + "}"
    back = _load(_npz(meta))
    if depth > MAX_DEPTH:
        assert back is None
    else:
        assert json.dumps(back) == tree


DESCRS = st.sampled_from(["<f8", "<f4", "|b1", ">i2", "|O", "<U3", "|V0", "(2,)<f4",
                          "[('a', '<i4')]", "'junk'", "{}"])


@given(st.lists(st.integers(-2, 2 ** 40) | st.integers(0, 3), max_size=4).map(tuple),
       DESCRS, st.booleans(), st.integers(0, 64))
def test_crafted_npy_headers(shape, descr, fortran, nbytes):
    header = f"{{'descr': {descr if descr[0] in '[{{' else repr(descr)}, " \
             f"'fortran_order': {fortran}, 'shape': {shape!r}, }}"
    header = header.encode() + b" " * (63 - (10 + len(header)) % 64) + b"\n"
    raw = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(nbytes)
    back = _load(_npz('{"format": "tapegrad-npz", "version": 1, "tree": {"$array": "w"}}',
                      w=raw))
    if back is not None:
        assert isinstance(back, np.ndarray) and back.shape == shape and back.nbytes == nbytes
        assert not back.dtype.hasobject
