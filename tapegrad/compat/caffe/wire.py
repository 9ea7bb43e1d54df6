"""Protobuf's wire format, read and written directly for ``.caffemodel`` files.

A ``.caffemodel`` is a download from strangers, often hundreds of megabytes of
packed floats. Parsing it with protobuf would materialise every float as a Python
object on access and report a malformed file as protobuf's own exception; this
walker reads only what :mod:`tapegrad.compat.caffe.files` asks for (layer names,
types and blobs), checks every length against the bytes that remain, and turns
packed floats into NumPy arrays with one copy. Every failure is a
:class:`CaffeFileError`.
"""

from __future__ import annotations

import numpy as np

from ...errors import SerializationError

__all__ = ["CaffeFileError", "fields", "varint_bytes", "field_bytes", "packed_varints",
           "packed_numbers", "signed64"]

VARINT, FIXED64, LENGTH, FIXED32 = 0, 1, 2, 5


class CaffeFileError(SerializationError):
    """A Caffe file (``.prototxt``, ``.caffemodel``) is malformed, truncated, over a
    size limit, or does not fit the network: the message names the file, the layer
    and the blob, and what to do."""


class Malformed(Exception):
    """Internal: raised by the walker, re-raised as CaffeFileError with the file's name."""


def _varint(buf, pos: int, end: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= end:
            raise Malformed("a varint runs past the end of its message (truncated file?)")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift >= 70:
            raise Malformed("a varint is longer than 10 bytes")


def fields(buf, start: int, end: int):
    """Yield ``(number, wire_type, value)`` for each field of the message in
    ``buf[start:end]``: an int for varints, ``(lo, hi)`` byte offsets for
    length-delimited and fixed-width fields."""
    pos = start
    while pos < end:
        key, pos = _varint(buf, pos, end)
        number, wire = key >> 3, key & 7
        if number == 0:
            raise Malformed("a field has number 0")
        if wire == VARINT:
            value, pos = _varint(buf, pos, end)
            yield number, wire, value
            continue
        if wire == LENGTH:
            n, pos = _varint(buf, pos, end)
        elif wire in (FIXED64, FIXED32):
            n = 8 if wire == FIXED64 else 4
        else:
            raise Malformed(f"field {number} has wire type {wire} (groups or invalid)")
        if n > end - pos:
            raise Malformed(f"field {number} declares {n} bytes but only {end - pos} remain "
                            "in its message (truncated file?)")
        yield number, wire, (pos, pos + n)
        pos += n


def signed64(v: int) -> int:
    """A signed int32/int64 read as a varint (negatives are 10-byte two's complement)."""
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def packed_varints(buf, lo: int, hi: int, limit: int) -> list[int]:
    out = []
    pos = lo
    while pos < hi:
        v, pos = _varint(buf, pos, hi)
        out.append(v)
        if len(out) > limit:
            raise Malformed(f"more than {limit} values in a packed field")
    return out


def packed_numbers(buf, lo: int, hi: int, dtype: str, what: str) -> bytes:
    """The raw little-endian bytes of a packed float (``<f4``) or double (``<f8``)."""
    size = np.dtype(dtype).itemsize
    if (hi - lo) % size:
        raise Malformed(f"{what} holds {hi - lo} bytes, not a whole number of "
                        f"{size}-byte values")
    return bytes(buf[lo:hi])


# ----------------------------------------------------------------------- writing


def varint_bytes(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field_bytes(number: int, payload: bytes) -> bytes:
    """A length-delimited field (a string, a sub-message or a packed array)."""
    return varint_bytes(number << 3 | LENGTH) + varint_bytes(len(payload)) + payload

