"""MATLAB v5 ``.mat`` files checked before scipy reads them.

scipy's reader inflates a compressed variable whole and allocates every array
at the size its header declares, so a 1 MB file can ask for gigabytes and a
deep cell recurses until Python gives up. :func:`checked_stream` walks the
file's elements first (MATLAB's "MAT-File Format", level 5): it inflates
each ``miCOMPRESSED`` element incrementally with a bounded output, checks every
``miMATRIX`` (class, dimensions, data sizes, nesting) against a
:class:`~._matcheck.Budget`, and returns the same variables uncompressed, which
scipy then reads without allocating more than was declared and counted.
"""

from __future__ import annotations

import struct
import zlib

from ._matcheck import count

__all__ = ["checked_stream"]

_MI_MATRIX, _MI_COMPRESSED = 14, 15
# bytes per element of each storage type (miINT8 .. miUTF32; 8, 10, 11 are reserved)
_MI_SIZE = {1: 1, 2: 1, 3: 2, 4: 2, 5: 4, 6: 4, 7: 4, 9: 8, 12: 8, 13: 8, 16: 1, 17: 2, 18: 4}
_MI_UTF8 = 16
_CELL, _STRUCT, _CHAR = 1, 2, 4
# bytes per element of the array scipy makes for each class (char -> one UCS-4 str)
_CLASS_SIZE = {4: 4, 6: 8, 7: 4, 8: 1, 9: 1, 10: 2, 11: 2, 12: 4, 13: 4, 14: 8, 15: 8}
_REFUSED = {3: "a MATLAB object", 5: "a sparse array", 16: "a function handle",
            17: "a MATLAB object (opaque class)"}
_MAX_DIMS = 32
_CHUNK = 1 << 20  # compressed bytes read at a time


def checked_stream(fh, size, budget) -> bytes:
    """The v5 file ``fh`` (``size`` bytes) as an uncompressed v5 stream, every
    variable checked against ``budget``; raises ``budget.bad(...)``."""
    head = fh.read(128)
    if len(head) < 128:
        raise budget.bad(f"it is {size} bytes long, shorter than a MAT-file's 128-byte header")
    order = {b"IM": "<", b"MI": ">"}.get(head[126:128])
    if order is None or head[:6] != b"MATLAB":
        raise budget.bad(f"it is not a MATLAB v5 or v7.3 MAT-file (its header starts with "
                         f"{head[:16]!r}; v4 files are not read)")
    reader = _Matrices(order, budget)
    # the subsystem offset (MATLAB objects' data) is cleared: objects are refused anyway
    out = [head[:116] + b"\x00" * 8 + head[124:]]
    pos = 128
    while pos < size:
        tag = fh.read(8)
        if len(tag) < 8:
            raise budget.bad(f"it ends inside an element's tag at byte {pos} (truncated?)")
        mdtype, nbytes = struct.unpack(order + "II", tag)
        if nbytes > size - pos - 8:
            raise budget.bad(f"the element at byte {pos} declares {nbytes} bytes but the file "
                             f"has {size - pos - 8} left (truncated?)")
        if mdtype == _MI_COMPRESSED:
            data = _inflate(fh, nbytes, budget, pos, order)
        elif mdtype == _MI_MATRIX:
            budget.take_stream(nbytes, f"the variable at byte {pos}")
            data = tag + fh.read(nbytes)
        else:
            raise budget.bad(f"the element at byte {pos} has type {mdtype}, not a variable "
                             "(miMATRIX) or a compressed one (miCOMPRESSED)")
        budget.take_items(1, f"the variable at byte {pos}")
        out.append(reader.variable(data, pos))
        pos += 8 + nbytes
    return b"".join(out)


def _inflate(fh, nbytes, budget, pos, order) -> bytes:
    """The ``nbytes`` compressed bytes at ``fh``, inflated incrementally: to at
    most the size its variable's tag declares, which must fit what the budget
    has left (the inflated bytes are counted)."""
    room = budget.max_bytes - budget.stream
    z = zlib.decompressobj()
    parts, total, left, declared = [], 0, nbytes, None
    try:
        while left and not z.eof:
            chunk = fh.read(min(_CHUNK, left))
            left -= len(chunk)
            while chunk and not z.eof:
                # the tag first (8 bytes), then at most what it declares, plus one to
                # see a bomb that lies (max_length >= 1: 0 would mean no bound)
                part = z.decompress(chunk, (8 if declared is None else room + 1) - total)
                total += len(part)
                parts.append(part)
                chunk = z.unconsumed_tail
                if declared is None and total >= 8:
                    head = b"".join(parts)[:8]
                    declared = 8 + struct.unpack(order + "II", head)[1]
                    budget.check_stream(declared, f"the compressed variable at byte {pos}")
                    room = declared
                if total > room:
                    raise budget.bad(f"the compressed variable at byte {pos} inflates to more "
                                     f"than the {room} bytes "
                                     + ("its tag declares" if declared is not None else
                                        f"max_bytes={budget.max_bytes} leaves")
                                     + " (a zlib bomb?)")
    except zlib.error as e:
        raise budget.bad(f"the compressed variable at byte {pos} is corrupt (zlib: {e})") from e
    if not z.eof:
        raise budget.bad(f"the compressed variable at byte {pos} ends early (truncated?)")
    budget.take_stream(total, f"the compressed variable at byte {pos}")
    return b"".join(parts)


class _Matrices:
    """Walks one variable's ``miMATRIX`` element and its sub-elements."""

    def __init__(self, order, budget):
        self.order, self.budget = order, budget

    def variable(self, data, pos) -> bytes:
        """``data``: one variable's element (tag included), checked; returns it
        with its tag rewritten as an uncompressed miMATRIX."""
        if len(data) < 8:
            raise self.budget.bad(f"the variable at byte {pos} ends inside its tag")
        mdtype, nbytes = struct.unpack(self.order + "II", data[:8])
        if mdtype != _MI_MATRIX:
            raise self.budget.bad(f"the variable at byte {pos} holds an element of type "
                                  f"{mdtype}, not a MATLAB array (miMATRIX)")
        if nbytes > len(data) - 8:
            raise self.budget.bad(f"the variable at byte {pos} declares {nbytes} bytes but "
                                  f"holds {len(data) - 8} (truncated?)")
        self.matrix(data, 8, 8 + nbytes, 0, f"the variable at byte {pos}")
        return struct.pack(self.order + "II", _MI_MATRIX, nbytes) + data[8:8 + nbytes]

    def sub(self, buf, pos, end, what):
        """The sub-element at ``pos``: ``(type, data start, data end, next)``."""
        if pos + 8 > end:
            raise self.budget.bad(f"{what} ends early (truncated or corrupt)")
        word, nbytes = struct.unpack_from(self.order + "II", buf, pos)
        if word >> 16:  # small data element format: up to 4 bytes inside the tag
            n = word >> 16
            if n > 4:
                raise self.budget.bad(f"{what} has a malformed small element ({n} bytes)")
            return word & 0xFFFF, pos + 4, pos + 4 + n, pos + 8
        start = pos + 8
        if nbytes > end - start:
            raise self.budget.bad(f"{what} declares {nbytes} bytes but has {end - start} left "
                                  "(truncated or corrupt)")
        return word, start, start + nbytes, min(start + (nbytes + 7) // 8 * 8, end)

    def ints(self, buf, start, stop, kind, what):
        code, size = {5: ("i", 4), 6: ("I", 4), 1: ("b", 1)}[kind]
        return struct.unpack_from(f"{self.order}{(stop - start) // size}{code}", buf, start)

    def matrix(self, buf, pos, end, depth, what):
        """Check the array whose content is ``buf[pos:end]``."""
        b = self.budget
        b.check_depth(depth, what)
        if pos == end:
            return  # MATLAB's empty element (an empty cell entry)
        kind, s, e, pos = self.sub(buf, pos, end, what)
        if kind != 6 or e - s != 8:
            raise b.bad(f"{what} has malformed array flags (type {kind}, {e - s} bytes)")
        flags = self.ints(buf, s, e, 6, what)[0]
        cls, is_complex = flags & 0xFF, bool(flags & 0x800)
        if cls in _REFUSED:
            raise b.bad(f"{what} is {_REFUSED[cls]} (MATLAB class {cls}), which a simplenn "
                        "network does not hold and tapegrad does not read")
        if cls not in _CLASS_SIZE and cls not in (_CELL, _STRUCT):
            raise b.bad(f"{what} has an unknown MATLAB class {cls}")
        kind, s, e, pos = self.sub(buf, pos, end, what)
        if kind != 5 or (e - s) % 4 or not 2 <= (e - s) // 4 <= _MAX_DIMS:
            raise b.bad(f"{what} has malformed dimensions (type {kind}, {e - s} bytes)")
        dims = self.ints(buf, s, e, 5, what)
        if min(dims) < 0:
            raise b.bad(f"{what} has negative dimensions {list(dims)}")
        kind, s, e, pos = self.sub(buf, pos, end, what)
        if kind != 1:
            raise b.bad(f"{what} has a malformed name (type {kind})")
        name = bytes(buf[s:e]).decode("latin-1")
        if depth == 0 and name:
            what = f"variable {name!r}"
        n = count(dims)
        shape = "x".join(map(str, dims))
        if cls == _CELL:
            b.take_items(n, f"{what} (a {shape} cell)")
            for i in range(n):
                pos = self.element(buf, pos, end, depth, f"{what}{{{i + 1}}}")
        elif cls == _STRUCT:
            b.take_items(n, f"{what} (a {shape} struct)")
            kind, s, e, pos = self.sub(buf, pos, end, what)
            width = self.ints(buf, s, e, 5, what)[0] if kind == 5 and e - s == 4 else -1
            kind, s, e, pos = self.sub(buf, pos, end, what)
            if width < 0 or kind != 1 or (width == 0 and e > s) or (width and (e - s) % width):
                raise b.bad(f"{what} has malformed struct field names")
            nfields = (e - s) // width if width else 0
            for i in range(n * nfields):
                pos = self.element(buf, pos, end, depth, f"{what}({i // nfields + 1}) field "
                                                         f"{i % nfields + 1}")
        else:
            if cls == _CHAR and n:  # scipy makes one str per row (all but the last dim)
                b.take_items(count(dims[:-1]), f"{what} (a {shape} char array)")
            b.take_bytes(n * _CLASS_SIZE[cls] * (2 if is_complex else 1),
                         f"{what} (a {shape} array of MATLAB class {cls})")
            for part in ("real", "imaginary")[:2 if is_complex else 1]:
                kind, s, e, pos = self.sub(buf, pos, end, f"{what}'s {part} part")
                size = _MI_SIZE.get(kind)
                if size is None:
                    raise b.bad(f"{what}'s {part} part has an unknown storage type {kind}")
                ok = (e - s >= n) if kind == _MI_UTF8 else (e - s == n * size)
                if not ok:
                    raise b.bad(f"{what} is {shape} ({n} elements) but its {part} part holds "
                                f"{e - s} bytes of {size}-byte elements (truncated or corrupt)")

    def element(self, buf, pos, end, depth, what):
        """A nested miMATRIX at ``pos`` (a cell entry, a struct field); its end."""
        kind, s, e, nxt = self.sub(buf, pos, end, what)
        if kind != _MI_MATRIX:
            raise self.budget.bad(f"{what} is an element of type {kind}, not a MATLAB array")
        self.matrix(buf, s, e, depth + 1, what)
        return nxt
